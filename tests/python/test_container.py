"""The container image as Microsoft's emulator image is used: built offline from the broker under
test by `config/container/build.sh`, run with podman (installed by `.ci/run`; on this kind of
host with `config/container/containers.conf`) on published loopback ports, and driven by the
official azure-servicebus SDK, by `podman healthcheck` and by testcontainers-python through
podman's Docker-compatible socket, as the Testcontainers modules drive the emulator.
"""

import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType

from sb_common import DEADLINE_S, OPERATION_TIMEOUT_S, RECEIVE_WAIT_S, body_of
from tidebus_broker import broker_binary

ROOT = Path(__file__).resolve().parents[2]
CONTAINER_DIR = ROOT / "config" / "container"
READY_LINE = "Emulator Service is Successfully Up!"
EMULATOR_CONFIG = "/ServiceBus_Emulator/ConfigFiles/Config.json"
START_DEADLINE_S = 60
# The emulator's SQL Server settings, which the image accepts and ignores.
EMULATOR_ENV = {
    "ACCEPT_EULA": "Y",
    "SQL_SERVER": "sqledge",
    "MSSQL_SA_PASSWORD": "Not-Logged-42",
    "SQL_WAIT_INTERVAL": "0",
}
CONFIG_JSON = """{
  "UserConfig": {
    "Namespaces": [{
      "Name": "sbemulatorns",
      "Queues": [{"Name": "mounted.queue", "Properties": {"MaxDeliveryCount": 3}}],
      "Topics": [{"Name": "mounted.topic", "Properties": {},
                  "Subscriptions": [{"Name": "all", "Properties": {}, "Rules": []}]}]
    }],
    "Logging": {"Type": "File"}
  }
}
"""


def podman_env():
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINER_DIR / "containers.conf")}


def podman(*args, check=True, timeout=120):
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: .ci/run installs it (apt-get install podman runc libcap2-bin)")
    return subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, check=check,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def image():
    """The image built from the binary under test, removed after the module."""
    tag = f"localhost/tidebus:test-{uuid.uuid4().hex[:8]}"
    built = subprocess.run(
        [str(CONTAINER_DIR / "build.sh"), broker_binary()],
        env={**podman_env(), "TIDEBUS_IMAGE": tag}, capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, f"build.sh failed:\n{built.stdout}\n{built.stderr}"
    size = podman("image", "inspect", tag, "--format", "{{.Size}}").stdout.strip()
    print(f"image {tag}: {int(size) / 1e6:.1f} MB")
    yield tag
    podman("rmi", "-f", tag, check=False)


def wait_for_log(name, line, deadline_s=START_DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        logs = podman("logs", name, check=False)
        text = logs.stdout + logs.stderr
        if line in text:
            return text
        state = podman("inspect", name, "--format", "{{.State.Status}}", check=False).stdout
        assert "exited" not in state, f"the container exited:\n{text}"
        time.sleep(0.1)
    pytest.fail(f"no {line!r} within {deadline_s} s:\n{text}")


def host_port(name, port):
    """The loopback port podman published `port` of container `name` on."""
    mapped = podman("port", name, f"{port}/tcp").stdout.strip().splitlines()[0]
    return int(mapped.rsplit(":", 1)[1])


def emulator_string(port):
    return (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
    )


def round_trip(connection, queue, body, **options):
    """Sends `body` to `queue` and receives it back, completing it."""
    options = {"retry_total": 0, "try_timeout": OPERATION_TIMEOUT_S, **options}
    with ServiceBusClient.from_connection_string(connection, **options) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(body))
        with client.get_queue_receiver(queue, max_wait_time=RECEIVE_WAIT_S) as receiver:
            got = []
            deadline = time.monotonic() + DEADLINE_S
            while not got and time.monotonic() < deadline:
                got = receiver.receive_messages(max_message_count=1, max_wait_time=1)
            assert [body_of(m) for m in got] == [body]
            receiver.complete_message(got[0])


def test_the_image_reads_the_emulators_config_and_serves_on_published_ports(image, tmp_path):
    config = tmp_path / "Config.json"
    config.write_text(CONFIG_JSON)
    name = f"tidebus-test-{uuid.uuid4().hex[:8]}"
    env = [arg for key, value in EMULATOR_ENV.items() for arg in ("-e", f"{key}={value}")]
    started = time.monotonic()
    podman(
        "run", "-d", "--name", name, *env,
        "-p", "127.0.0.1::5672", "-p", "127.0.0.1::5300", "-p", "127.0.0.1::443",
        "-v", f"{config}:{EMULATOR_CONFIG}:ro", image,
    )
    try:
        logs = wait_for_log(name, READY_LINE)
        print(f"ready {time.monotonic() - started:.2f} s after run")
        assert "ignoring the emulator's SQL Server settings" in logs, logs
        assert "ACCEPT_EULA, SQL_SERVER, MSSQL_SA_PASSWORD, SQL_WAIT_INTERVAL" in logs, logs
        assert EMULATOR_ENV["MSSQL_SA_PASSWORD"] not in logs, "the password is never logged"
        assert "0.0.0.0:5672" in logs, "listens on all interfaces inside the container"
        user = podman("inspect", name, "--format", "{{.Config.User}}").stdout.strip()
        assert user == "10001:10001", f"runs as {user!r}"

        admin = host_port(name, 5300)
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/health", timeout=10) as answer:
            assert answer.status == 200, "the administration endpoint is plain HTTP"
        checked = podman("healthcheck", "run", name, check=False)
        assert checked.returncode == 0, f"HEALTHCHECK: {checked.stdout}{checked.stderr}"

        amqp = host_port(name, 5672)
        round_trip(emulator_string(amqp), "mounted.queue", "through the mapped port")
        with ServiceBusClient.from_connection_string(emulator_string(amqp), retry_total=0) as client:
            with client.get_topic_sender("mounted.topic") as sender:
                sender.send_messages(ServiceBusMessage("to the topic"))
            with client.get_subscription_receiver("mounted.topic", "all") as receiver:
                got = receiver.receive_messages(max_message_count=1, max_wait_time=RECEIVE_WAIT_S)
                assert [body_of(m) for m in got] == ["to the topic"]
                receiver.complete_message(got[0])
        websocket = host_port(name, 443)
        round_trip(
            emulator_string(amqp), "mounted.queue", "over a WebSocket on 443, as user 10001",
            transport_type=TransportType.AmqpOverWebsocket,
            custom_endpoint_address=f"sb://127.0.0.1:{websocket}",
        )
    finally:
        podman("stop", "-t", "20", name, check=False)
        code = podman("inspect", name, "--format", "{{.State.ExitCode}}", check=False).stdout
        logs = podman("logs", name, check=False)
        podman("rm", "-f", "-v", name, check=False)
    assert code.strip() == "0", f"exit code {code!r} after SIGTERM:\n{logs.stderr}"


@pytest.fixture
def docker_socket(tmp_path):
    """podman's Docker-compatible API on a socket of this test's, as DOCKER_HOST."""
    socket = tmp_path / "podman.sock"
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket}"],
        env=podman_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + START_DEADLINE_S
    while not socket.exists() and time.monotonic() < deadline:
        assert service.poll() is None, "podman system service exited"
        time.sleep(0.05)
    settings = {
        "DOCKER_HOST": f"unix://{socket}",
        # No reaper container (podman removes ours when the test stops it).
        "TESTCONTAINERS_RYUK_DISABLED": "true",
        # The test machines are containers themselves (/.dockerenv): without this testcontainers
        # looks for a gateway address instead of the published loopback ports.
        "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
    }
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        yield socket
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        service.terminate()
        service.wait(timeout=30)


def test_testcontainers_waits_for_the_ready_line_and_reaches_the_default_entities(image, docker_socket):
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = DockerContainer(image).with_exposed_ports(5672, 5300)
    for key, value in EMULATOR_ENV.items():
        container = container.with_env(key, value)
    with container:
        wait_for_logs(container, READY_LINE, timeout=START_DEADLINE_S)
        host = container.get_container_host_ip()
        port = int(container.get_exposed_port(5672))
        admin = int(container.get_exposed_port(5300))
        with urllib.request.urlopen(f"http://{host}:{admin}/health", timeout=10) as answer:
            assert answer.status == 200
        # No Config.json mounted: the embedded default's entities.
        round_trip(emulator_string(port).replace("127.0.0.1", host), "queue.1", "testcontainers")
