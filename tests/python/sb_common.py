"""What the azure-servicebus suites share: the client on a test broker, messages, bounded steps.

The `client` fixture (conftest.py) is built by `open_client` with `retry_total=0`: a local
broker has no transient faults, so a retry would only hide one. Every wait is bounded: the
client's `try_timeout` bounds each attempt (opening a link included: without it the SDK waits
forever for a CBS answer that never comes), each receive has a `max_wait_time`, and loops run
against a deadline.
"""

import time
from datetime import datetime, timedelta, timezone

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.exceptions import ServiceBusAuthenticationError

# Bound on collecting the messages a test expects, over several receive calls.
DEADLINE_S = 30.0
# `max_wait_time` of one receive call.
RECEIVE_WAIT_S = 5
# The client's `try_timeout`, and `timeout` of the calls that take one (send, peek, renew,
# deferred receive). Without it opening a sender waits forever if the broker never answers CBS.
OPERATION_TIMEOUT_S = 20
# The slack allowed between a time the broker reports and the local clock.
CLOCK_SLACK = timedelta(seconds=1)
# How far past an instant (a lock's or a message's expiry) a test waits before it counts it as
# passed.
EXPIRY_MARGIN = timedelta(milliseconds=250)


# What this SDK raises for an entity that does not exist: Service Bus refuses the CBS token put
# for it with 404 "The messaging entity '...' could not be found", which the SDK reports as an
# authentication error (its own live test_sb_client_bad_entity expects exactly that).
ENTITY_NOT_FOUND = ServiceBusAuthenticationError


def is_missing_entity(error, name=None):
    """Whether `error` (an ENTITY_NOT_FOUND) is the broker's 404 for a missing entity (named
    `name`, if given), not another refused token."""
    cause = str(getattr(error, "inner_exception", "") or "")
    return "Status code: 404" in cause and (name is None or f"'{name}'" in cause)


def connection_string(broker):
    return (
        f"Endpoint=sb://{broker.host}:{broker.port};"
        "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
        "UseDevelopmentEmulator=true;"
    )


def open_client(broker):
    """A `ServiceBusClient` on `broker`'s current address; use it as a context manager."""
    return ServiceBusClient.from_connection_string(
        connection_string(broker),
        retry_total=0,
        try_timeout=OPERATION_TIMEOUT_S,
        logging_enable=True,
    )


# --- messages ------------------------------------------------------------------------------------


def numbered(tag, index, **fields):
    """Message `<tag>-<index>`; `fields` sets more `ServiceBusMessage` arguments (time_to_live)."""
    return ServiceBusMessage(
        f"{tag} body {index}",
        message_id=f"{tag}-{index}",
        application_properties={"index": index, "tag": tag},
        **fields,
    )


def text(value):
    """A received string: the SDK hands back bytes for AMQP strings."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def body_of(message):
    return b"".join(message.body).decode("utf-8")


def properties_of(message):
    return {text(key): text(value) for key, value in (message.application_properties or {}).items()}


def summary(message):
    """What a test compares: message id, body, application properties."""
    return (message.message_id, body_of(message), properties_of(message))


def expected_summary(tag, index):
    return (f"{tag}-{index}", f"{tag} body {index}", {"index": index, "tag": tag})


def ids(messages):
    return [message.message_id for message in messages]


def now_utc():
    """The clock the SDK judges locks by (its `utc_now`)."""
    return datetime.now(timezone.utc)


# --- client steps --------------------------------------------------------------------------------


def send(client, queue, messages):
    """Send a message, a list or a batch to `queue` with a fresh sender."""
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(messages, timeout=OPERATION_TIMEOUT_S)


def receive_exactly(receiver, count, deadline_s=DEADLINE_S):
    """Receive until `count` messages arrived; fails if that takes longer than `deadline_s`."""
    received = []
    deadline = time.monotonic() + deadline_s
    while len(received) < count and time.monotonic() < deadline:
        received += receiver.receive_messages(
            max_message_count=count - len(received), max_wait_time=RECEIVE_WAIT_S
        )
    assert len(received) == count, (
        f"expected {count} messages within {deadline_s:.0f} s, got {len(received)}: {ids(received)}"
    )
    return received


def receive_one(receiver):
    return receive_exactly(receiver, 1)[0]


def assert_only_marker_left(client, queue, receive_mode=ServiceBusReceiveMode.PEEK_LOCK):
    """Send a marker; a fresh receiver's first messages must be just the marker.

    FIFO makes anything still available in the queue arrive before it, so this shows the queue
    held nothing else, without waiting for a receive to time out.
    """
    send(client, queue, ServiceBusMessage("marker", message_id="marker"))
    with client.get_queue_receiver(queue, receive_mode=receive_mode) as receiver:
        first = receive_one(receiver)
        assert first.message_id == "marker", (
            f"{queue} still held {first.message_id!r} ({body_of(first)!r}) before the marker"
        )
        if receive_mode == ServiceBusReceiveMode.PEEK_LOCK:
            receiver.complete_message(first)


def crash(broker, *opened):
    """`kill -9` the broker, then close what the test had open on it (their connections died
    with it, so closing may fail)."""
    broker.kill9()
    for closing in opened:
        try:
            closing.close()
        except Exception:  # the connection died with the broker
            pass


def wait_until_past(instant, deadline_s=DEADLINE_S):
    """Poll the SDK's clock until it is `EXPIRY_MARGIN` past `instant` (a lock or TTL expiry)."""
    target = instant + EXPIRY_MARGIN
    deadline = time.monotonic() + deadline_s
    while now_utc() <= target:
        assert time.monotonic() < deadline, f"{instant} not passed within {deadline_s:.0f} s"
        time.sleep(0.05)


def wait_until_not_found(attach, what, poll_s=0.25):
    """Call `attach` (a step that opens a link and closes it again) until it fails with
    entity-not-found; returns when it did. Attaching is not activity, so polling does not keep
    an entity alive for auto-delete."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            attach()
        except ENTITY_NOT_FOUND as error:
            assert is_missing_entity(error), f"{what}: refused for another reason: {error!r}"
            return now_utc()
        assert time.monotonic() < deadline, f"{what} still exists after {DEADLINE_S:.0f} s"
        time.sleep(poll_s)
