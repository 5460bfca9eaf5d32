"""The real broker binary ($TIDEBUS_BIN) as a child process on a free loopback port."""

import os
import signal
import subprocess
import time
from pathlib import Path

START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 20.0
POLL_S = 0.05

# What every test broker runs with unless a test asks otherwise: anonymous clients let in, and
# the emulator's policy, whose key signs the tokens the SDKs put (the broker verifies them).
DEFAULT_SETTINGS = {"durability": "memory", "idle_timeout": "60s", "allow_anonymous": True}
DEFAULT_QUEUES = ["q1", "q2", "q3", "q4", "queue.1"]
EMULATOR_POLICY = {
    "name": "RootManageSharedAccessKey",
    "key": "SAS_KEY_VALUE",
    "rights": ["Manage", "Send", "Listen"],
}
DEFAULT_POLICIES = [EMULATOR_POLICY]


class BrokerError(Exception):
    """The broker did not start or stop as the contract says (design.md section 5)."""


def toml_value(value):
    """Encode a str, int, bool or dict (an inline table) as a TOML value."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    raise TypeError(f"no TOML encoding for {value!r} ({type(value).__name__})")


def render_config(settings, queues, topics=(), policies=()):
    """The config file text: `[broker]` settings (a `tls` dict becomes `[broker.tls]`, a
    `testing` dict `[testing]`), one
    `[[shared_access_policies]]` table per policy, one `[[queues]]` table per queue, then one
    `[[topics]]` table per topic.

    A policy is a dict with `name`, `key` (or `key_env`) and `rights`. A queue is a name, or a
    dict with `name`, any other `[[queues]]` keys and `shared_access_policies`. A topic is a
    dict with `name`, its keys, and `subscriptions`: names, or dicts with `name`, their keys and
    `rules` (dicts with `name` and `sql`, `action` or `correlation`).
    """
    settings = dict(settings)
    tls = settings.pop("tls", None)
    testing = settings.pop("testing", None)
    lines = ["[broker]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in settings.items()]
    if tls:
        lines += ["", "[broker.tls]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in tls.items()]
    if testing:
        lines += ["", "[testing]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in testing.items()]
    for policy in policies:
        lines += ["", "[[shared_access_policies]]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in policy.items()]
    for queue in queues:
        table = {"name": queue} if isinstance(queue, str) else dict(queue)
        queue_policies = table.pop("shared_access_policies", [])
        lines += ["", "[[queues]]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
        for policy in queue_policies:
            lines += ["", "[[queues.shared_access_policies]]"]
            lines += [f"{key} = {toml_value(value)}" for key, value in policy.items()]
    for topic in topics:
        topic = dict(topic)
        subscriptions = topic.pop("subscriptions", [])
        lines += ["", "[[topics]]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in topic.items()]
        for subscription in subscriptions:
            table = {"name": subscription} if isinstance(subscription, str) else dict(subscription)
            rules = table.pop("rules", [])
            lines += ["", "[[topics.subscriptions]]"]
            lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
            for rule in rules:
                lines += ["", "[[topics.subscriptions.rules]]"]
                lines += [f"{key} = {toml_value(value)}" for key, value in rule.items()]
    return "\n".join(lines) + "\n"


def broker_binary():
    path = os.environ.get("TIDEBUS_BIN")
    if not path:
        raise BrokerError(
            "TIDEBUS_BIN is not set: run the suite through `cargo test`, or set it to a built "
            "broker, e.g. TIDEBUS_BIN=target/debug/tidebus"
        )
    if not os.access(path, os.X_OK):
        raise BrokerError(f"TIDEBUS_BIN={path} is not an executable file")
    return path


class Broker:
    """One running broker. `host`, `port` and `url` say where it listens; `tls_port` where its
    TLS listener does, if it has one; `websocket_addresses` the `(host, port)` of each listener
    of `websocket_listen`."""

    def __init__(self, workdir: Path, settings=None, queues=None, topics=None, policies=None):
        self.workdir = Path(workdir)
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.queues = list(DEFAULT_QUEUES if queues is None else queues)
        self.topics = list(topics or [])
        self.policies = list(DEFAULT_POLICIES if policies is None else policies)
        self.tls_port = None
        self.websocket_addresses = []
        self.admin_port = None
        self.config_path = self.workdir / "tidebus.toml"
        self.ready_path = self.workdir / "ready"
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "broker.log"
        self.process = None
        self.host = None
        self.port = None

    @property
    def url(self):
        return f"amqp://{self.host}:{self.port}"

    @property
    def address(self):
        return (self.host, self.port)

    def read_log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker log)"

    def start(self):
        """Start the broker; again after `stop()` it reuses the workdir (and so the data).

        A restart gets a new port: clients must reconnect to `address`.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            render_config(self.settings, self.queues, self.topics, self.policies)
        )
        # The previous run's address must not pass for this run's.
        self.ready_path.unlink(missing_ok=True)
        command = [
            broker_binary(),
            "--config", str(self.config_path),
            "--listen", "127.0.0.1:0",
            "--admin-listen", "127.0.0.1:0",
            "--data-dir", str(self.data_dir),
            "--ready-file", str(self.ready_path),
        ]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info,tidebus=debug")
        env.setdefault("RUST_BACKTRACE", "1")
        # Appended, so a failed test after a restart shows every run's log.
        with open(self.log_path, "ab") as log:
            log.write(("$ " + " ".join(command) + "\n").encode())
            log.flush()
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        try:
            (self.host, self.port), self.tls_port, self.admin_port = self._wait_ready()
            self.websocket_addresses = websocket_addresses(self.ready_path)
        except BaseException:
            self._kill()
            raise
        return self

    def _wait_ready(self):
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            code = self.process.poll()
            if code is not None:
                raise BrokerError(f"broker exited with code {code} before writing {self.ready_path}")
            address = parse_ready_file(self.ready_path)
            if address is not None:
                return address
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"broker did not write a bound address to {self.ready_path} "
                    f"within {START_DEADLINE_S:.0f} s"
                )
            time.sleep(POLL_S)

    def stop(self):
        """SIGTERM, then wait for a graceful exit with code 0. Raises BrokerError otherwise."""
        if self.process is None:
            return
        code = self.process.poll()
        if code is not None:
            raise BrokerError(f"broker exited on its own with code {code} before teardown")
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self._kill()
            raise BrokerError(
                f"broker did not exit within {STOP_DEADLINE_S:.0f} s of SIGTERM; killed it"
            ) from None
        if code != 0:
            raise BrokerError(f"broker exited with code {code} after SIGTERM, expected 0")
        # Stopped as asked: a second stop (the fixture's teardown) has nothing to do.
        self.process = None

    def reload(self, queues=None, topics=None, text=None):
        """Rewrite the config file (new `queues` and `topics`, or raw `text`), send SIGHUP and
        wait until the broker has applied or refused it; returns the log lines it wrote."""
        if queues is not None:
            self.queues = list(queues)
        if topics is not None:
            self.topics = list(topics)
        if text is None:
            text = render_config(self.settings, self.queues, self.topics, self.policies)
        before = self.read_log()
        self.config_path.write_text(text)
        self.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            log = self.read_log()
            added = log[len(before):]
            if "reload applied" in added or "reload refused" in added:
                return added
            if time.monotonic() > deadline:
                raise BrokerError(f"no reload within {START_DEADLINE_S:.0f} s:\n{added}")
            time.sleep(POLL_S)

    def kill9(self):
        """SIGKILL, as a crash: the next `start()` recovers from what was durable."""
        self._kill()
        self.process = None

    def _kill(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def parse_ready_file(path):
    """`((host, port), tls_port, admin_port)` once the ready file holds `host:port` on its first
    line (then `tls host:port` when TLS is on and `admin host:port` for the administration
    endpoint; a port is None when its line is absent), else None."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return None

    def address(text):
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit():
            return None
        return host.strip("[]"), int(port)

    plain = address(lines[0]) if lines else None
    if plain is None:
        return None

    def port_of(prefix):
        found = next((address(line[len(prefix):]) for line in lines if line.startswith(prefix)), None)
        return found[1] if found else None

    return plain, port_of("tls "), port_of("admin ")


def websocket_addresses(path):
    """The `(host, port)` of each `websocket host:port` line of a ready file."""
    found = []
    for line in Path(path).read_text().splitlines():
        if line.startswith("websocket "):
            host, _, port = line[len("websocket "):].rpartition(":")
            found.append((host.strip("[]"), int(port)))
    return found


def generate_certificates(directory):
    """`tidebus gen-cert` for localhost into `directory`: the paths of ca.pem, server.pem and
    server-key.pem by name."""
    subprocess.run(
        [broker_binary(), "gen-cert", "--host", "localhost", "--out", str(directory)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return {name: directory / name for name in ("ca.pem", "server.pem", "server-key.pem")}
