"""Small helpers around python-qpid-proton's blocking API for the tests."""

import contextlib
import uuid

from proton import Delivery, Message, Timeout
from proton.utils import BlockingConnection

# Every wait on the broker gets this long before the test fails.
DEADLINE_S = 30.0


@contextlib.contextmanager
def connect(broker, **kwargs):
    """A BlockingConnection to `broker`, closed on exit. kwargs go to proton's Container.connect
    (user, password, allowed_mechs, heartbeat, max_frame_size, ...)."""
    conn = BlockingConnection(broker.url, timeout=DEADLINE_S, **kwargs)
    try:
        yield conn
    except BaseException:
        with contextlib.suppress(Exception):
            conn.close()
        raise
    conn.close()


def barrier(conn, address):
    """Attach and detach a throwaway sender on `conn`.

    The blocking API only writes frames while it waits, and the broker answers frames in order:
    once the detach comes back, the broker has read everything `conn` wrote before, such as a
    receiver's settlement.
    """
    conn.create_sender(address, name=f"barrier-{uuid.uuid4()}").close()


def settle_modified(receiver, delivery_failed=True, undeliverable_here=False):
    """Settle the oldest unsettled delivery of a BlockingReceiver with `modified`, flags set.

    proton's `receiver.release(delivered=True)` also sends `modified`, but always with
    delivery-failed false; AMQP 1.0 (3.4.5) requires counting the attempt only when it is true.
    """
    delivery = receiver.fetcher.unsettled.popleft()
    delivery.local.failed = delivery_failed
    delivery.local.undeliverable = undeliverable_here
    delivery.update(Delivery.MODIFIED)
    delivery.settle()


def send_accepted(sender, message):
    delivery = sender.send(message)
    assert delivery.remote_state == Delivery.ACCEPTED, (
        f"broker settled the send to {sender.target.address} with {delivery.remote_state}, "
        "expected ACCEPTED"
    )
    return delivery


def assert_round_trip(conn, address, body):
    """Send `body` to `address` and receive it back on the same connection, then detach."""
    sender = conn.create_sender(address)
    receiver = conn.create_receiver(address)
    send_accepted(sender, Message(body=body))
    received = receiver.receive(timeout=DEADLINE_S)
    receiver.accept()
    assert received.body == body, f"sent {body!r} to {address}, received {received.body!r}"
    sender.close()
    receiver.close()


def pump(conn, seconds):
    """Run `conn`'s event loop (so proton reads, writes and heartbeats) for `seconds`.

    Raises if the connection is closed or lost meanwhile."""
    try:
        conn.wait(lambda: False, timeout=seconds, msg="pumping an idle connection")
    except Timeout:
        pass
