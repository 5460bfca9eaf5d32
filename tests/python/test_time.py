"""Time in the broker (issue 6) against the official azure-servicebus SDK: scheduled messages,
time to live, dead-lettering on expiry and auto-delete on idle (design.md section 4).

Each test runs its own broker and client (conftest.py, sb_common.py). Waits for a condition are
poll loops against `DEADLINE_S`. Waits on the clock itself are only for semantics that are
about time (a due time, a TTL, an idle period), each with a margin. What a slow machine could
race is judged on the times the broker reports (`enqueued_time_utc`, `expires_at_utc`) or on
the order of messages in the queue, not on when the test got round to looking:

* "not before its due time" is an activation time (the enqueued time) not before the due time;
* "not after its TTL" is a marker sent after the expiry arriving first (FIFO);
* a message that must outlive its TTL under a lock is taken by a receiver that already holds
  credit, so the broker locks it when it is enqueued however slowly the test runs.

Total waiting is about 50 s: the scheduled tests wait out a 4-6 s lead, the TTL tests 1-2 s,
the auto-delete tests 3x a 2 s idle period.
"""

import logging
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

import pytest
from azure.servicebus import (
    ServiceBusMessageState,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessageNotFoundError

from sb_common import (
    DEADLINE_S,
    ENTITY_NOT_FOUND,
    OPERATION_TIMEOUT_S,
    assert_only_marker_left,
    is_missing_entity,
    expected_summary,
    ids,
    now_utc,
    numbered,
    open_client,
    receive_exactly,
    receive_one,
    send,
    summary,
    wait_until_not_found,
    wait_until_past,
)

# How far ahead a test schedules a message it then waits for.
SCHEDULE_LEAD = timedelta(seconds=5)
# `max_wait_time` of the receive that must get nothing before the due time: well inside the lead.
EARLY_WAIT_S = 2
# A due time no test reaches: the message stays scheduled.
FAR_AHEAD = timedelta(minutes=10)
# More than any test has messages in a queue.
PEEK_MAX = 10
# `prefetch_count` of a receiver that must lock messages as they arrive.
PREFETCH = 10
# `max_wait_time` of the receive that grants such a receiver its credit.
PRIME_WAIT_S = 1
# The dead-letter reason of an expired message.
TTL_EXPIRED = "TTLExpiredException"
# `auto_delete_on_idle` of the auto-delete tests.
IDLE = timedelta(seconds=2)
# `max_wait_time` of each receive of a receiver that must keep its queue busy.
LOOP_WAIT_S = 1
# Pause between two polls of a condition.
POLL_S = 0.25

SCHEDULED = ServiceBusMessageState.SCHEDULED
ACTIVE = ServiceBusMessageState.ACTIVE
DEAD_LETTER = ServiceBusSubQueue.DEAD_LETTER


# --- helpers -------------------------------------------------------------------------------------


def ms(instant):
    """An instant as AMQP timestamps carry it: whole milliseconds since the epoch."""
    return round(instant.timestamp() * 1000)


def due_in(lead):
    """An instant `lead` from now, cut to whole milliseconds as the SDK sends it."""
    instant = now_utc() + lead
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def peek_all(receiver):
    """Every message of the receiver's queue, scheduled ones included, by sequence number.

    `sequence_number=1` (the first the broker assigns) because otherwise the SDK resumes after
    the last message its previous peek saw.
    """
    return receiver.peek_messages(
        max_message_count=PEEK_MAX, sequence_number=1, timeout=OPERATION_TIMEOUT_S
    )


def states(messages):
    return [(message.message_id, message.state) for message in messages]


def receive_when_due(receiver, count, due):
    """Receive `count` messages scheduled for `due`: none before it, all within DEADLINE_S.

    A first receive ends well before `due` and must get nothing; a message it does get is only
    allowed if a slow machine had already passed `due` when the call returned. Whatever the
    timing, each message's enqueued time (its activation) must not be before `due`.
    """
    early = receiver.receive_messages(max_message_count=count, max_wait_time=EARLY_WAIT_S)
    returned = now_utc()
    assert not early or returned >= due, (
        f"{ids(early)} received at {returned}, before their due time {due}"
    )
    received = early + receive_exactly(receiver, count - len(early))
    for message in received:
        assert ms(message.enqueued_time_utc) >= ms(due), (
            f"{message.message_id}: activated (enqueued) at {message.enqueued_time_utc}, "
            f"before its due time {due}"
        )
    return received


@contextmanager
def locking_receiver(client, queue):
    """A peek-lock receiver that holds credit from the start.

    The SDK grants credit at a receiver's first receive call, and a prefetching receiver keeps
    it between calls: from then on the broker delivers, and so locks, each message as soon as
    it is enqueued, however long the test takes to ask for it.
    """
    with client.get_queue_receiver(queue, prefetch_count=PREFETCH) as receiver:
        early = receiver.receive_messages(max_wait_time=PRIME_WAIT_S)
        assert early == [], f"{queue} was not empty: {ids(early)}"
        yield receiver


def wait_for(condition, what, deadline_s=DEADLINE_S):
    """Poll `condition()` until true; fails naming `what` after `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {deadline_s:.0f} s: {what}"
        time.sleep(POLL_S)


def wait_until_deleted(client, queue):
    """Open senders on `queue` until one fails with entity-not-found; returns when it did.

    Entering `with sender:` attaches the link (the SDK waits for the broker's attach), and
    attaching is not activity, so polling does not keep the queue alive.
    """

    def attach():
        with client.get_queue_sender(queue):
            pass

    return wait_until_not_found(attach, queue, POLL_S)


class ReceiveLoop(threading.Thread):
    """A receiver on its own client that keeps waiting on `queue` (receive-and-delete) until
    `stop` is set; collects the ids it receives and the error that ended it, if any."""

    def __init__(self, broker, queue):
        super().__init__(name=f"receive-loop-{queue}", daemon=True)
        self.broker = broker
        self.queue = queue
        self.waiting = threading.Event()
        self.stop = threading.Event()
        self.received = []
        self.error = None

    def run(self):
        try:
            with open_client(self.broker) as client, client.get_queue_receiver(
                self.queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
            ) as receiver:
                while not self.stop.is_set():
                    self.waiting.set()
                    batch = receiver.receive_messages(
                        max_message_count=PEEK_MAX, max_wait_time=LOOP_WAIT_S
                    )
                    self.received += ids(batch)
        except Exception as error:  # reported by the test
            self.error = error


# --- scheduled messages --------------------------------------------------------------------------


def test_scheduled_messages_get_numbers_and_arrive_at_due_time_renumbered(client):
    with client.get_queue_sender("q1") as sender, client.get_queue_receiver("q1") as receiver:
        due = due_in(SCHEDULE_LEAD)
        numbers = sender.schedule_messages(
            [numbered("sched", 0), numbered("sched", 1)], due, timeout=OPERATION_TIMEOUT_S
        )
        assert len(numbers) == 2 and len(set(numbers)) == 2, f"sequence numbers {numbers!r}"
        assert all(isinstance(number, int) for number in numbers), f"sequence numbers {numbers!r}"

        received = receive_when_due(receiver, 2, due)
        assert sorted(summary(m) for m in received) == [
            expected_summary("sched", i) for i in range(2)
        ]
        for message in received:
            assert message.sequence_number > max(numbers), (
                f"{message.message_id}: activated as {message.sequence_number}, not a new number "
                f"after the scheduled ones {numbers}"
            )
            # Held until due, it is delivered as scheduled, as Service Bus does (the JavaScript
            # SDK's live suite asserts it).
            assert message.state == SCHEDULED, f"{message.message_id}: state {message.state!r}"
            receiver.complete_message(message)


def test_cancelled_scheduled_message_leaves_peek_and_is_never_received(client):
    with client.get_queue_sender("q1") as sender, client.get_queue_receiver("q1") as receiver:
        cancelled_due = due_in(SCHEDULE_LEAD)
        [cancelled] = sender.schedule_messages(
            numbered("cancel", 0), cancelled_due, timeout=OPERATION_TIMEOUT_S
        )
        before = peek_all(receiver)
        assert [(m.message_id, m.sequence_number) for m in before] == [("cancel-0", cancelled)]

        sender.cancel_scheduled_messages(cancelled, timeout=OPERATION_TIMEOUT_S)
        after = peek_all(receiver)
        assert after == [], f"peek after the cancel: {states(after)}"
        # Cancelling a number that is no scheduled message answers message-not-found.
        with pytest.raises(MessageNotFoundError):
            sender.cancel_scheduled_messages(cancelled, timeout=OPERATION_TIMEOUT_S)

        # Due a second after the cancelled one: had that been activated, it would come first.
        kept_due = cancelled_due + timedelta(seconds=1)
        sender.schedule_messages(numbered("cancel", 1), kept_due, timeout=OPERATION_TIMEOUT_S)
        [first] = receive_when_due(receiver, 1, kept_due)
        assert first.message_id == "cancel-1", f"{first.message_id} arrived: it was cancelled"
        receiver.complete_message(first)


def test_peek_shows_a_scheduled_message_as_scheduled_with_its_number(client):
    send(client, "q1", numbered("peek", 0))
    due = due_in(FAR_AHEAD)
    with client.get_queue_sender("q1") as sender:
        [number] = sender.schedule_messages(numbered("peek", 1), due, timeout=OPERATION_TIMEOUT_S)

    with client.get_queue_receiver("q1") as receiver:
        peeked = peek_all(receiver)
    assert states(peeked) == [("peek-0", ACTIVE), ("peek-1", SCHEDULED)]
    active, scheduled = peeked
    assert scheduled.sequence_number == number, (
        f"peek shows {scheduled.sequence_number}, schedule_messages returned {number}"
    )
    assert active.sequence_number < number
    assert scheduled.scheduled_enqueue_time_utc is not None, "the scheduled time is kept"
    assert ms(scheduled.scheduled_enqueue_time_utc) == ms(due)


def test_send_with_scheduled_enqueue_time_is_delayed_until_due(client):
    with client.get_queue_sender("q1") as sender, client.get_queue_receiver("q1") as receiver:
        due = due_in(SCHEDULE_LEAD)
        sender.send_messages(
            numbered("delayed", 0, scheduled_enqueue_time_utc=due), timeout=OPERATION_TIMEOUT_S
        )
        peeked = peek_all(receiver)
        assert states(peeked) == [("delayed-0", SCHEDULED)], "a send with a due time schedules"

        [message] = receive_when_due(receiver, 1, due)
        assert summary(message) == expected_summary("delayed", 0)
        assert message.sequence_number > peeked[0].sequence_number, "activation renumbers"
        receiver.complete_message(message)


@pytest.mark.broker(durability="sync")
def test_scheduled_message_survives_a_restart_and_activates(broker, caplog):
    caplog.set_level(logging.DEBUG, logger="azure.servicebus")
    due = due_in(SCHEDULE_LEAD)
    with open_client(broker) as client, client.get_queue_sender("q1") as sender:
        [number] = sender.schedule_messages(
            numbered("restart", 0), due, timeout=OPERATION_TIMEOUT_S
        )

    broker.stop()
    broker.start()

    # Due while the broker was down (activated at once) or after it came back: either way once.
    with open_client(broker) as client:
        with client.get_queue_receiver("q1") as receiver:
            message = receive_one(receiver)
            assert summary(message) == expected_summary("restart", 0)
            assert ms(message.enqueued_time_utc) >= ms(due), (
                f"activated at {message.enqueued_time_utc}, before its due time {due}"
            )
            assert message.sequence_number > number, "activation renumbers"
            receiver.complete_message(message)
        assert_only_marker_left(client, "q1")


# --- time to live --------------------------------------------------------------------------------


def test_message_is_not_received_after_its_ttl(client):
    send(client, "q1", numbered("ttl", 0, time_to_live=timedelta(seconds=1)))
    sent = now_utc()
    # The broker enqueued it before the send returned, so it has expired 1 s after `sent`.
    wait_until_past(sent + timedelta(seconds=1))
    assert_only_marker_left(client, "q1")


def test_expired_message_is_swept_from_peek_and_deleted(client):
    send(client, "q1", numbered("swept", 0, time_to_live=timedelta(seconds=1)))
    # Opened but never receiving: no credit, so only the sweeper can remove the message.
    with client.get_queue_receiver("q1") as receiver:
        wait_for(lambda: peek_all(receiver) == [], "the sweeper removed the expired message")
    with client.get_queue_receiver("q1", sub_queue=DEAD_LETTER) as dlq:
        dead = peek_all(dlq)
    assert dead == [], f"dead-lettered without dead_lettering_on_message_expiration: {states(dead)}"


@pytest.mark.broker(queues=[{"name": "q1", "dead_lettering_on_message_expiration": True}])
def test_expired_message_is_dead_lettered_by_the_sweeper(client):
    send(client, "q1", numbered("expire", 0, time_to_live=timedelta(seconds=1)))

    # No receiver on q1: the sweeper has to move it.
    with client.get_queue_receiver("q1", sub_queue=DEAD_LETTER) as dlq:
        dead = receive_one(dlq)
        assert summary(dead)[:2] == expected_summary("expire", 0)[:2], "message id or body differ"
        assert dead.dead_letter_reason == TTL_EXPIRED, (
            f"dead_letter_reason {dead.dead_letter_reason!r}, description "
            f"{dead.dead_letter_error_description!r}"
        )
        dlq.complete_message(dead)

    with client.get_queue_receiver("q1") as receiver:
        left = peek_all(receiver)
    assert left == [], f"q1 still shows {states(left)}"


@pytest.mark.broker(queues=[{"name": "q1", "default_message_time_to_live": "2s"}])
def test_entity_default_ttl_caps_and_fills_in_the_message_ttl(client):
    expected = {
        "cap-0": timedelta(seconds=2),  # 1 h, capped
        "cap-1": timedelta(seconds=2),  # none, the default
        "cap-2": timedelta(seconds=1),  # shorter than the default: kept
    }
    with locking_receiver(client, "q1") as receiver:
        send(
            client,
            "q1",
            [
                numbered("cap", 0, time_to_live=timedelta(hours=1)),
                numbered("cap", 1),
                numbered("cap", 2, time_to_live=timedelta(seconds=1)),
            ],
        )
        received = receive_exactly(receiver, 3)
        got = {m.message_id: m.time_to_live for m in received}
        assert got == expected, "the delivered header.ttl is the effective TTL"
        for message in received:
            assert message.expires_at_utc - message.enqueued_time_utc == expected[message.message_id]
            receiver.complete_message(message)


@pytest.mark.broker(
    queues=[{"name": "q1", "lock_duration": "10s", "dead_lettering_on_message_expiration": True}]
)
def test_message_locked_before_its_ttl_can_be_completed_after_it(client):
    with locking_receiver(client, "q1") as receiver:
        send(client, "q1", numbered("locked", 0, time_to_live=timedelta(seconds=2)))
        message = receive_one(receiver)
        expires = message.expires_at_utc
        assert expires is not None and message.locked_until_utc > expires, (
            f"locked until {message.locked_until_utc}, expires at {expires}"
        )
        wait_until_past(expires)
        # The lock, not the TTL, decides while the message is locked.
        receiver.complete_message(message)

    # The control: the same queue dead-letters a message nobody locks. Had the locked one been
    # dead-lettered at its TTL, it would be in the DLQ first.
    send(client, "q1", numbered("unlocked", 0, time_to_live=timedelta(seconds=1)))
    with client.get_queue_receiver("q1", sub_queue=DEAD_LETTER) as dlq:
        dead = receive_one(dlq)
        assert (dead.message_id, dead.dead_letter_reason) == ("unlocked-0", TTL_EXPIRED)
        dlq.complete_message(dead)


@pytest.mark.broker(
    queues=[{"name": "q1", "lock_duration": "10s", "dead_lettering_on_message_expiration": True}]
)
def test_abandoned_message_past_its_ttl_expires_at_once(client):
    with locking_receiver(client, "q1") as receiver:
        send(client, "q1", numbered("abandon", 0, time_to_live=timedelta(seconds=2)))
        message = receive_one(receiver)
        wait_until_past(message.expires_at_utc)
        receiver.abandon_message(message)

        # Had the abandon made it available again, it would come before a later marker.
        send(client, "q1", numbered("marker", 0))
        next_one = receive_one(receiver)
        assert next_one.message_id == "marker-0", "an expired message came back after its lock"
        receiver.complete_message(next_one)

    with client.get_queue_receiver("q1", sub_queue=DEAD_LETTER) as dlq:
        dead = receive_one(dlq)
        assert (dead.message_id, dead.dead_letter_reason) == ("abandon-0", TTL_EXPIRED)
        dlq.complete_message(dead)


def test_scheduled_message_ttl_counts_from_activation(client):
    ttl = timedelta(seconds=3)
    with client.get_queue_sender("q1") as sender, locking_receiver(client, "q1") as receiver:
        # Counted from the scheduling, the TTL would end a second before the due time.
        due = due_in(timedelta(seconds=4))
        sender.schedule_messages(
            numbered("later", 0, time_to_live=ttl), due, timeout=OPERATION_TIMEOUT_S
        )
        message = receive_one(receiver)
        assert ms(message.enqueued_time_utc) >= ms(due), (
            f"activated at {message.enqueued_time_utc}, before its due time {due}"
        )
        assert message.time_to_live == ttl
        assert message.expires_at_utc - message.enqueued_time_utc == ttl
        receiver.complete_message(message)


# --- auto-delete on idle -------------------------------------------------------------------------


@pytest.mark.broker(queues=["q1", {"name": "idle", "auto_delete_on_idle": "2s"}])
def test_idle_queue_is_deleted_with_its_dead_letter_queue(client):
    started = now_utc()
    send(client, "idle", numbered("idle", 0))

    seen_gone = wait_until_deleted(client, "idle")
    # The send was activity at some instant after `started`.
    assert seen_gone >= started + IDLE, f"deleted {seen_gone - started} after a send"
    for sub_queue in (None, DEAD_LETTER):
        with pytest.raises(ENTITY_NOT_FOUND) as caught:
            with client.get_queue_receiver("idle", sub_queue=sub_queue):
                pass
        assert is_missing_entity(caught.value), repr(caught.value.inner_exception)
    send(client, "q1", numbered("other", 0))  # other queues are untouched


# Both queues' idle clocks start with the broker, and the receiver on `busy` needs a CBS
# exchange and an attach (about a second in pyamqp) before it waits: a longer idle time than
# IDLE keeps a slow machine from losing `busy` before its receiver is there.
BUSY_IDLE = timedelta(seconds=6)


@pytest.mark.broker(
    queues=[
        {"name": "busy", "auto_delete_on_idle": "6s"},
        {"name": "idle", "auto_delete_on_idle": "6s"},
    ]
)
def test_queue_with_a_waiting_receiver_is_not_deleted(broker, client):
    loop = ReceiveLoop(broker, "busy")
    loop.start()
    try:
        assert loop.waiting.wait(DEADLINE_S), f"the receiver on busy did not start: {loop.error!r}"
        started = now_utc()
        # The control: the same idle time deletes the queue nobody uses.
        wait_until_deleted(client, "idle")
        wait_until_past(started + 2 * BUSY_IDLE)

        assert loop.is_alive(), f"the receiver on busy stopped: {loop.error!r}"
        send(client, "busy", numbered("busy", 0))
        wait_for(lambda: "busy-0" in loop.received, "the waiting receiver got busy-0")
    finally:
        loop.stop.set()
        loop.join(DEADLINE_S)
    assert loop.error is None, f"the receiver on busy failed: {loop.error!r}"
