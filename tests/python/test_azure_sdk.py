"""The broker against the official Azure Service Bus SDK for Python, unmodified.

`azure-servicebus` (its own pure-Python AMQP stack, pyamqp) connects the way it connects to
Microsoft's emulator: `UseDevelopmentEmulator=true` in the connection string means plain TCP and
the custom port kept. Before any link it authenticates with a CBS `put-token` on `$cbs`; peek,
lock renewal, deferred receive and settling a deferred message go through the entity's
`$management` node. So these tests cover amqp-dialect.md sections 2 to 7 and 11 as one real
client sees them.

Each test runs its own broker and client (conftest.py; the client's settings and the shared
steps are in sb_common.py). Every wait is bounded, and the one wait on the clock itself is for a
lock to expire. On a failure pytest shows the SDK's log, frame trace included
(`logging_enable=True`), next to the broker's.
"""

from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
)

from sb_common import (
    CLOCK_SLACK,
    ENTITY_NOT_FOUND,
    OPERATION_TIMEOUT_S,
    assert_only_marker_left,
    expected_summary,
    ids,
    is_missing_entity,
    now_utc,
    numbered,
    receive_exactly,
    receive_one,
    send,
    summary,
    wait_until_past,
)

# The broker's default lock duration (design.md section 4).
DEFAULT_LOCK = timedelta(seconds=60)


def send_single_list_and_batch(client, queue, tag):
    """Send five messages in three calls: one message, a list of two, a batch of two.

    Returns their expected summaries in send order.
    """
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(numbered(tag, 0), timeout=OPERATION_TIMEOUT_S)
        sender.send_messages([numbered(tag, 1), numbered(tag, 2)], timeout=OPERATION_TIMEOUT_S)
        batch = sender.create_message_batch()
        batch.add_message(numbered(tag, 3))
        batch.add_message(numbered(tag, 4))
        sender.send_messages(batch, timeout=OPERATION_TIMEOUT_S)
    return [expected_summary(tag, index) for index in range(5)]


# --- tests ---------------------------------------------------------------------------------------


def test_single_list_and_batch_sends_arrive_intact_in_peek_lock(client):
    expected = send_single_list_and_batch(client, "q1", "intact")

    with client.get_queue_receiver("q1") as receiver:
        received = receive_exactly(receiver, len(expected))
        assert [summary(m) for m in received] == expected, "message id, body or properties differ"
        for message in received:
            receiver.complete_message(message)


def test_received_messages_carry_sequence_number_times_and_count(client):
    sent_at = now_utc()
    expected = send_single_list_and_batch(client, "q1", "annotated")

    with client.get_queue_receiver("q1") as receiver:
        before_receive = now_utc()
        received = receive_exactly(receiver, len(expected))
        after_receive = now_utc()
        assert ids(received) == [message_id for message_id, _, _ in expected]

        numbers = [m.sequence_number for m in received]
        assert all(isinstance(n, int) for n in numbers), f"sequence numbers {numbers!r}"
        assert numbers == list(range(numbers[0], numbers[0] + len(expected))), (
            f"sequence numbers are not gap-free and increasing across the sends: {numbers}"
        )

        for message in received:
            enqueued = message.enqueued_time_utc
            assert enqueued is not None and enqueued.tzinfo is not None, (
                f"{message.message_id}: enqueued_time_utc must be timezone-aware, got {enqueued!r}"
            )
            assert sent_at - CLOCK_SLACK <= enqueued <= after_receive + CLOCK_SLACK, (
                f"{message.message_id}: enqueued {enqueued} not between {sent_at} and {after_receive}"
            )
            assert message.delivery_count == 0, (
                f"{message.message_id}: first receipt has delivery_count {message.delivery_count}"
            )
            locked_until = message.locked_until_utc
            assert locked_until is not None and locked_until.tzinfo is not None, (
                f"{message.message_id}: locked_until_utc must be timezone-aware, got {locked_until!r}"
            )
            assert locked_until > now_utc(), f"{message.message_id}: lock {locked_until} already over"
            assert (
                before_receive + DEFAULT_LOCK - CLOCK_SLACK
                <= locked_until
                <= after_receive + DEFAULT_LOCK + CLOCK_SLACK
            ), f"{message.message_id}: locked until {locked_until}, not 60 s after the receive"
        enqueued_times = [m.enqueued_time_utc for m in received]
        assert enqueued_times == sorted(enqueued_times), f"enqueued times go back: {enqueued_times}"
        for message in received:
            receiver.complete_message(message)


def test_receive_and_delete_delivers_once(client):
    send(client, "q1", [numbered("once", i) for i in range(3)])

    with client.get_queue_receiver(
        "q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        received = receive_exactly(receiver, 3)
    assert [summary(m) for m in received] == [expected_summary("once", i) for i in range(3)]
    for message in received:
        assert message.locked_until_utc is None, f"{message.message_id} has a lock in receive-and-delete"

    # A second receiver gets nothing of them: the marker sent afterwards comes first.
    assert_only_marker_left(client, "q1", ServiceBusReceiveMode.RECEIVE_AND_DELETE)


def test_complete_removes_the_message(client):
    send(client, "q1", numbered("complete", 0))

    with client.get_queue_receiver("q1") as receiver:
        message = receive_one(receiver)
        assert summary(message) == expected_summary("complete", 0)
        receiver.complete_message(message)

    assert_only_marker_left(client, "q1")


def test_abandon_redelivers_with_delivery_count_plus_one(client):
    send(client, "q1", numbered("abandon", 0))

    with client.get_queue_receiver("q1") as receiver:
        first = receive_one(receiver)
        assert (first.message_id, first.delivery_count) == ("abandon-0", 0)
        receiver.abandon_message(first)

        again = receive_one(receiver)
        assert summary(again) == expected_summary("abandon", 0)
        assert again.sequence_number == first.sequence_number, "abandon must keep the sequence number"
        assert again.delivery_count == 1, f"after one abandon delivery_count is {again.delivery_count}"
        receiver.complete_message(again)

    assert_only_marker_left(client, "q1")


def test_deferred_message_is_received_only_by_sequence_number(client):
    send(client, "q1", numbered("defer", 0))

    with client.get_queue_receiver("q1") as receiver:
        original = receive_one(receiver)
        assert original.message_id == "defer-0"
        number = original.sequence_number
        receiver.defer_message(original)

        # A normal receive skips the deferred message: the marker sent afterwards comes first.
        assert_only_marker_left(client, "q1")

        deferred = receiver.receive_deferred_messages([number], timeout=OPERATION_TIMEOUT_S)
        assert [summary(m) for m in deferred] == [expected_summary("defer", 0)]
        assert deferred[0].sequence_number == number
        assert deferred[0].locked_until_utc is not None and deferred[0].locked_until_utc > now_utc(), (
            f"a deferred message received in peek-lock is locked: {deferred[0].locked_until_utc!r}"
        )
        receiver.complete_message(deferred[0])

        with pytest.raises(MessageNotFoundError):
            gone = receiver.receive_deferred_messages([number], timeout=OPERATION_TIMEOUT_S)
            pytest.fail(f"a completed deferred message came back: {ids(gone)}")


def test_dead_letter_keeps_reason_and_description(client):
    send(client, "q1", numbered("dead", 0))

    with client.get_queue_receiver("q1") as receiver:
        message = receive_one(receiver)
        receiver.dead_letter_message(message, reason="r1", error_description="d1")

    with client.get_queue_receiver("q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        dead = receive_one(dlq)
        assert summary(dead)[:2] == expected_summary("dead", 0)[:2]
        assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("r1", "d1")
        assert dead.sequence_number == message.sequence_number
        dlq.complete_message(dead)

    assert_only_marker_left(client, "q1")


@pytest.mark.broker(queues=[{"name": "q1", "max_delivery_count": 2}])
def test_max_delivery_count_dead_letters_after_two_abandons(client):
    send(client, "q1", numbered("limit", 0))

    with client.get_queue_receiver("q1") as receiver:
        for attempt in range(2):
            message = receive_one(receiver)
            assert (message.message_id, message.delivery_count) == ("limit-0", attempt)
            receiver.abandon_message(message)

    with client.get_queue_receiver("q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        dead = receive_one(dlq)
        assert dead.message_id == "limit-0"
        assert dead.dead_letter_reason == "MaxDeliveryCountExceeded", (
            f"dead_letter_reason {dead.dead_letter_reason!r}, description "
            f"{dead.dead_letter_error_description!r}"
        )
        dlq.complete_message(dead)

    assert_only_marker_left(client, "q1")


def test_renew_message_lock_moves_locked_until_forward(client):
    send(client, "q1", numbered("renew", 0))

    with client.get_queue_receiver("q1") as receiver:
        message = receive_one(receiver)
        before = message.locked_until_utc
        assert before is not None, "a peek-lock message has locked_until_utc"

        renewed = receiver.renew_message_lock(message, timeout=OPERATION_TIMEOUT_S)
        assert renewed > before, f"renewed lock {renewed} is not later than {before}"
        assert message.locked_until_utc == renewed
        assert renewed <= now_utc() + DEFAULT_LOCK + CLOCK_SLACK, f"lock renewed too far: {renewed}"
        receiver.complete_message(message)

    assert_only_marker_left(client, "q1")


def test_peek_does_not_lock(client):
    send(client, "q1", [numbered("peek", i) for i in range(3)])

    with client.get_queue_receiver("q1") as receiver:
        peeked = receiver.peek_messages(max_message_count=10, timeout=OPERATION_TIMEOUT_S)
        assert [summary(m) for m in peeked] == [expected_summary("peek", i) for i in range(3)]
        numbers = [m.sequence_number for m in peeked]
        assert numbers == list(range(numbers[0], numbers[0] + 3)), f"peeked numbers {numbers}"

        received = receive_exactly(receiver, 3)
        assert [m.sequence_number for m in received] == numbers, "receive after peek"
        assert [m.delivery_count for m in received] == [0, 0, 0], "peek must not count a delivery"
        for message in received:
            receiver.complete_message(message)


def test_send_to_unknown_queue_raises_entity_not_found(client):
    # The token put for the queue is refused with 404, before any link is attached.
    with pytest.raises(ENTITY_NOT_FOUND) as caught:
        with client.get_queue_sender("no-such-queue") as sender:
            sender.send_messages(ServiceBusMessage("lost"), timeout=OPERATION_TIMEOUT_S)
    assert is_missing_entity(caught.value, "no-such-queue"), repr(caught.value.inner_exception)


@pytest.mark.broker(queues=[{"name": "q1", "lock_duration": "2s"}])
def test_complete_after_lock_expiry_raises_lock_lost(client):
    send(client, "q1", numbered("expire", 0))

    with client.get_queue_receiver("q1") as receiver:
        before_receive = now_utc()
        message = receive_one(receiver)
        locked_until = message.locked_until_utc
        assert locked_until is not None
        assert (
            before_receive + timedelta(seconds=2) - CLOCK_SLACK
            <= locked_until
            <= now_utc() + timedelta(seconds=2) + CLOCK_SLACK
        ), f"locked until {locked_until}: not the queue's 2 s lock"

        wait_until_past(locked_until)
        # The SDK raises this itself once `locked_until_utc` has passed, before any frame is
        # sent; the next test has the broker say it (renew-lock on an expired lock).
        with pytest.raises(MessageLockLostError):
            receiver.complete_message(message)


@pytest.mark.broker(queues=[{"name": "q1", "lock_duration": "2s"}])
def test_expired_lock_cannot_be_renewed_and_the_message_returns(client):
    send(client, "q1", numbered("lapse", 0))

    with client.get_queue_receiver("q1") as receiver:
        first = receive_one(receiver)
        assert first.delivery_count == 0
        wait_until_past(first.locked_until_utc)
        # Unlike complete, renew asks the broker's management node: the broker says lock lost.
        with pytest.raises(MessageLockLostError):
            renewed = receiver.renew_message_lock(first, timeout=OPERATION_TIMEOUT_S)
            pytest.fail(f"an expired lock was renewed until {renewed}")

    with client.get_queue_receiver("q1") as receiver:
        again = receive_one(receiver)
        assert summary(again) == expected_summary("lapse", 0)
        assert again.sequence_number == first.sequence_number
        assert again.delivery_count == 1, f"after a lapsed lock delivery_count is {again.delivery_count}"
        receiver.complete_message(again)


@pytest.mark.broker(max_message_size="64KiB")
def test_oversized_message_raises_and_the_sender_still_works(client):
    with client.get_queue_sender("q1") as sender:
        with pytest.raises(MessageSizeExceededError):
            sender.send_messages(ServiceBusMessage(b"x" * (100 * 1024)), timeout=OPERATION_TIMEOUT_S)
        sender.send_messages(numbered("small", 0), timeout=OPERATION_TIMEOUT_S)

    with client.get_queue_receiver("q1") as receiver:
        message = receive_one(receiver)
        assert summary(message) == expected_summary("small", 0), "only the small message is stored"
        receiver.complete_message(message)


@pytest.mark.broker(max_message_size="64KiB", topics=[{"name": "t1", "subscriptions": ["s1"]}])
def test_an_oversized_schedule_raises_at_once_and_the_sender_still_schedules(client):
    later = now_utc() + timedelta(hours=1)
    for sender in (client.get_queue_sender("q1"), client.get_topic_sender("t1")):
        with sender:
            with pytest.raises(MessageSizeExceededError):
                sender.schedule_messages(
                    ServiceBusMessage(b"x" * (100 * 1024)), later, timeout=OPERATION_TIMEOUT_S
                )
            (number,) = sender.schedule_messages(numbered("small", 0), later, timeout=OPERATION_TIMEOUT_S)
            sender.cancel_scheduled_messages(number, timeout=OPERATION_TIMEOUT_S)


@pytest.mark.broker(queues=[{"name": "q1", "lock_duration": "2s"}])
def test_a_closed_receivers_lock_holds_until_it_expires(client):
    # Service Bus keeps a lock when its receiver goes: nobody else gets the message before the
    # lock expires, and then it comes back with one more delivery counted.
    send(client, "q1", numbered("held", 0))
    with client.get_queue_receiver("q1") as receiver:
        first = receive_one(receiver)
        locked_until = first.locked_until_utc
    with client.get_queue_receiver("q1") as receiver:
        again = receive_one(receiver)
        received_at = now_utc()
        assert received_at >= locked_until - CLOCK_SLACK / 10, (
            f"received at {received_at}, before the lock ran out at {locked_until}"
        )
        assert summary(again) == expected_summary("held", 0)
        assert again.delivery_count == 1
        receiver.complete_message(again)


def test_settle_through_the_management_link_after_the_receiver_link_broke(client):
    # The SDK's own live test: with the receiver link gone, complete falls back to
    # update-disposition by lock token on the management link; the lock is still valid.
    send(client, "q1", numbered("orphan", 0))
    with client.get_queue_receiver("q1") as receiver:
        message = receive_one(receiver)
        receiver._handler._link.detach()  # destroy the underlying receiver link
        receiver.complete_message(message)
    assert_only_marker_left(client, "q1")


def test_delivered_messages_are_encoded_as_service_bus_sends_them(client):
    # The SDK's backcompat tests measure what it decoded: no x-opt-message-state on an active
    # message, header fields the sender left out still null, 333 bytes re-encoded.
    outgoing = ServiceBusMessage(
        body="hello",
        application_properties={"prop": "test"},
        session_id="id_session",
        message_id="id_message",
        time_to_live=timedelta(seconds=30),
        content_type="content type",
        correlation_id="correlation",
        subject="github",
        partition_key="id_session",
        to="forward to",
        reply_to="reply to",
        reply_to_session_id="reply to session",
    )
    send(client, "q1", outgoing)
    send(client, "q1", numbered("deleted", 0))
    with client.get_queue_receiver("q1") as receiver:
        incoming = receive_one(receiver)
        legacy = incoming.message
        assert len(legacy.annotations) == 4, legacy.annotations
        assert str(legacy.header) == str(
            {"delivery_count": 0, "time_to_live": 30000, "first_acquirer": None, "durable": None, "priority": None}
        )
        assert legacy.get_message_encoded_size() == 333
        receiver.complete_message(incoming)
    with client.get_queue_receiver("q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
        deleted = receive_one(receiver)
        assert summary(deleted) == expected_summary("deleted", 0)
        assert deleted.message.delivery_annotations == {}, deleted.message.delivery_annotations
