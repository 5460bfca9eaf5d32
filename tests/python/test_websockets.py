"""AMQP over WebSockets through the official azure-servicebus SDK, sync (websocket-client) and
async (aiohttp), with `TransportType.AmqpOverWebsocket`, on every endpoint form a user meets:

- the emulator connection string with `custom_endpoint_address` to the plain port (ws);
- the bare emulator connection string, which drops its port for WebSockets: sync dials
  `ws://HOST/$servicebus/websocket` (80), async `ws://HOST:443/...`, so the broker listens
  there through `websocket_listen` (tests run as root on the project's machines);
- wss to the TLS port and to the plain port (TLS on the plain port too), trusting the
  `gen-cert` CA through `connection_verify`.

Every broker here refuses anonymous clients, so each client put its token through CBS over the
WebSocket. Each form sends, receives and settles (complete, abandon, dead-letter), peeks,
schedules and cancels, and uses a session (its state included).
"""

import asyncio
import time
import uuid
from datetime import timedelta

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusSubQueue,
    TransportType,
)
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from sb_common import DEADLINE_S, OPERATION_TIMEOUT_S, RECEIVE_WAIT_S, body_of, now_utc
from tidebus_broker import EMULATOR_POLICY, Broker, generate_certificates

QUEUES = ["q1", {"name": "sq", "requires_session": True}]
SECURED = {"allow_anonymous": False}
# The host the bare-connection-string test listens on with ports 80 and 443: its own loopback
# address, so that no other suite's listener can be in the way.
BARE_HOST = "127.0.0.3"


def emulator_string(host_and_port):
    return (
        f"Endpoint=sb://{host_and_port};SharedAccessKeyName={EMULATOR_POLICY['name']};"
        f"SharedAccessKey={EMULATOR_POLICY['key']};UseDevelopmentEmulator=true;"
    )


def tls_string(host_and_port):
    return (
        f"Endpoint=sb://{host_and_port}/;SharedAccessKeyName={EMULATOR_POLICY['name']};"
        f"SharedAccessKey={EMULATOR_POLICY['key']}"
    )


def options(**more):
    return {
        "transport_type": TransportType.AmqpOverWebsocket,
        "retry_total": 0,
        "try_timeout": OPERATION_TIMEOUT_S,
        **more,
    }


def receive_all(receiver, count):
    got = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        got += receiver.receive_messages(max_message_count=count - len(got), max_wait_time=1)
    assert len(got) == count, f"received {len(got)} of {count}"
    return got


def exercise(client, tag):
    """Send, receive and settle, peek, schedule and cancel, a session and its state: sync."""
    bodies = [f"{tag} {i}" for i in range(3)]
    with client.get_queue_sender("q1") as sender:
        sender.send_messages([ServiceBusMessage(body) for body in bodies])
        scheduled = sender.schedule_messages(
            ServiceBusMessage(f"{tag} later"), now_utc() + timedelta(hours=1)
        )
        sender.cancel_scheduled_messages(scheduled, timeout=OPERATION_TIMEOUT_S)
    with client.get_queue_receiver("q1", max_wait_time=RECEIVE_WAIT_S) as receiver:
        peeked = receiver.peek_messages(max_message_count=5, timeout=OPERATION_TIMEOUT_S)
        assert [body_of(m) for m in peeked] == bodies, "the cancelled one is gone"
        first, second, third = receive_all(receiver, 3)
        assert [body_of(m) for m in (first, second, third)] == bodies
        receiver.complete_message(first)
        receiver.abandon_message(second)
        receiver.dead_letter_message(third, reason=tag)
        (again,) = receive_all(receiver, 1)
        assert body_of(again) == bodies[1] and again.delivery_count == 1
        receiver.complete_message(again)
    with client.get_queue_receiver(
        "q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=RECEIVE_WAIT_S
    ) as dead:
        (letter,) = receive_all(dead, 1)
        assert body_of(letter) == bodies[2] and letter.dead_letter_reason == tag
        dead.complete_message(letter)
    session_id = f"{tag}-{uuid.uuid4()}"
    with client.get_queue_sender("sq") as sender:
        sender.send_messages([ServiceBusMessage(f"{tag} s{i}", session_id=session_id) for i in range(2)])
    with client.get_queue_receiver("sq", session_id=session_id, max_wait_time=RECEIVE_WAIT_S) as receiver:
        receiver.session.set_state(tag.encode(), timeout=OPERATION_TIMEOUT_S)
        assert receiver.session.get_state(timeout=OPERATION_TIMEOUT_S) == tag.encode()
        got = receive_all(receiver, 2)
        assert [body_of(m) for m in got] == [f"{tag} s0", f"{tag} s1"]
        for message in got:
            receiver.complete_message(message)


async def exercise_async(client, tag):
    """The same through the async client (aiohttp's WebSocket)."""
    bodies = [f"{tag} {i}" for i in range(3)]
    async with client.get_queue_sender("q1") as sender:
        await sender.send_messages([ServiceBusMessage(body) for body in bodies])
        scheduled = await sender.schedule_messages(
            ServiceBusMessage(f"{tag} later"), now_utc() + timedelta(hours=1)
        )
        await sender.cancel_scheduled_messages(scheduled, timeout=OPERATION_TIMEOUT_S)
    async with client.get_queue_receiver("q1", max_wait_time=RECEIVE_WAIT_S) as receiver:
        peeked = await receiver.peek_messages(max_message_count=5, timeout=OPERATION_TIMEOUT_S)
        assert [body_of(m) for m in peeked] == bodies, "the cancelled one is gone"
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 3 and time.monotonic() < deadline:
            got += await receiver.receive_messages(max_message_count=3 - len(got), max_wait_time=1)
        assert [body_of(m) for m in got] == bodies
        await receiver.complete_message(got[0])
        await receiver.abandon_message(got[1])
        await receiver.dead_letter_message(got[2], reason=tag)
        again = []
        while not again and time.monotonic() < deadline:
            again = await receiver.receive_messages(max_message_count=1, max_wait_time=1)
        assert [body_of(m) for m in again] == [bodies[1]]
        await receiver.complete_message(again[0])
    async with client.get_queue_receiver(
        "q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=RECEIVE_WAIT_S
    ) as dead:
        letters = await dead.receive_messages(max_message_count=1, max_wait_time=RECEIVE_WAIT_S)
        assert [body_of(m) for m in letters] == [bodies[2]]
        await dead.complete_message(letters[0])
    session_id = f"{tag}-{uuid.uuid4()}"
    async with client.get_queue_sender("sq") as sender:
        await sender.send_messages(ServiceBusMessage(f"{tag} s0", session_id=session_id))
    async with client.get_queue_receiver(
        "sq", session_id=session_id, max_wait_time=RECEIVE_WAIT_S
    ) as receiver:
        await receiver.session.set_state(tag.encode(), timeout=OPERATION_TIMEOUT_S)
        assert await receiver.session.get_state(timeout=OPERATION_TIMEOUT_S) == tag.encode()
        got = await receiver.receive_messages(max_message_count=1, max_wait_time=RECEIVE_WAIT_S)
        assert [body_of(m) for m in got] == [f"{tag} s0"]
        await receiver.complete_message(got[0])


def run_both(connection, tag, **extra):
    """`exercise` with the sync client, then `exercise_async` with the async one."""
    with ServiceBusClient.from_connection_string(connection, **options(**extra)) as client:
        exercise(client, f"{tag} sync")

    async def run_async():
        async with AsyncServiceBusClient.from_connection_string(
            connection, **options(**extra)
        ) as client:
            await exercise_async(client, f"{tag} async")

    asyncio.run(run_async())


def websocket_lines(broker):
    return [line for line in broker.read_log().splitlines() if "websocket=true" in line]


@pytest.mark.broker(queues=QUEUES, **SECURED)
def test_a_custom_endpoint_on_the_plain_port_carries_everything(broker):
    address = f"{broker.host}:{broker.port}"
    run_both(emulator_string(address), "custom", custom_endpoint_address=f"sb://{address}")
    assert websocket_lines(broker), "the connections were WebSockets"


def test_the_bare_emulator_string_dials_80_and_443(tmp_path):
    settings = {**SECURED, "websocket_listen": [f"{BARE_HOST}:80", f"{BARE_HOST}:443"]}
    broker = Broker(tmp_path / "broker", settings, queues=QUEUES)
    try:
        broker.start()
    except Exception as error:
        pytest.fail(f"ports 80 and 443 of {BARE_HOST} (root needed): {error}\n{broker.read_log()}")
    try:
        assert sorted(port for _, port in broker.websocket_addresses) == [80, 443]
        # Nothing else listens on BARE_HOST: had the SDK dialled another port, it was refused.
        run_both(emulator_string(BARE_HOST), "bare")
        assert websocket_lines(broker), "the connections were WebSockets"
    finally:
        broker.stop()


def test_wss_to_the_tls_port_and_to_the_plain_port_with_the_generated_ca(tmp_path):
    files = generate_certificates(tmp_path / "certs")
    settings = {
        **SECURED,
        "tls": {
            "listen": "127.0.0.1:0",
            "cert": str(files["server.pem"]),
            "key": str(files["server-key.pem"]),
        },
    }
    broker = Broker(tmp_path / "broker", settings, queues=QUEUES).start()
    try:
        for name, port in [("tls port", broker.tls_port), ("plain port", broker.port)]:
            address = f"localhost:{port}"
            run_both(
                tls_string(address),
                f"wss {name}",
                custom_endpoint_address=f"sb://{address}",
                connection_verify=str(files["ca.pem"]),
            )
        # AMQP over TLS (no WebSocket) on the plain port too.
        address = f"localhost:{broker.port}"
        amqps = {**options(), "transport_type": TransportType.Amqp}
        with ServiceBusClient.from_connection_string(
            tls_string(address),
            **amqps,
            custom_endpoint_address=f"sb://{address}",
            connection_verify=str(files["ca.pem"]),
        ) as client:
            exercise(client, "amqps plain port")
        log = broker.read_log()
        assert "tls=true" in log and "websocket=true" in log, "TLS and WebSockets were used"
    finally:
        broker.stop()
