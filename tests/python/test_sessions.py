"""Message sessions against the official Azure Service Bus SDK for Python, unmodified.

On a queue or subscription with `requires_session = true` every message carries a session id;
a session receiver holds one session (named, or the next available: the unlocked one whose
oldest message came first) and takes only its messages, in order. The session lock lasts
`lock_duration`, is renewed with `renew-session-lock`, and ends with the receiver; the
messages it held locked come back then, ahead of later ones. Session state is kept beside the
messages (design.md D8).
"""

import time
from datetime import timedelta

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)

from sb_common import (
    DEADLINE_S,
    OPERATION_TIMEOUT_S,
    crash,
    ids,
    now_utc,
    open_client,
    receive_exactly,
    send,
    wait_until_past,
)

SESSION_QUEUES = [
    {"name": "sq", "requires_session": True},
    {"name": "short", "requires_session": True, "lock_duration": "2s"},
    "plain",
]


def in_session(session, index):
    return ServiceBusMessage(
        f"{session} body {index}", message_id=f"{session}-{index}", session_id=session
    )


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_a_named_session_receiver_gets_only_its_session_in_order(client):
    # Interleaved sends: a's messages are 1, 4, 6 and b's 2, 3, 5 in sequence order.
    order = [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("b", 2), ("a", 2)]
    send(client, "sq", [in_session(s, i) for s, i in order])
    for session in ["b", "a"]:
        with client.get_queue_receiver("sq", session_id=session) as receiver:
            assert receiver.session.session_id == session
            assert receiver.session.locked_until_utc > now_utc()
            got = receive_exactly(receiver, 3)
            assert ids(got) == [f"{session}-{i}" for i in range(3)]
            assert all(m.session_id == session for m in got)
            numbers = [m.sequence_number for m in got]
            assert numbers == sorted(numbers)
            for message in got:
                receiver.complete_message(message)


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_next_available_takes_the_session_with_the_oldest_message_then_the_next(client):
    send(client, "sq", [in_session("late", 0), in_session("early", 0)])
    send(client, "sq", [in_session("late", 1)])
    # "late" holds the oldest message, so it comes first.
    first = client.get_queue_receiver("sq", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5)
    with first:
        assert first.session.session_id == "late"
        second = client.get_queue_receiver(
            "sq", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5
        )
        with second:
            assert second.session.session_id == "early"
            assert ids(receive_exactly(second, 1)) == ["early-0"]
        assert ids(receive_exactly(first, 2)) == ["late-0", "late-1"]


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_next_available_waits_for_a_session_and_times_out_without_one(client):
    receiver = client.get_queue_receiver("sq", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2)
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError):
        with receiver:
            receiver.receive_messages(max_wait_time=1)
    assert time.monotonic() - started < DEADLINE_S


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_a_held_session_cannot_be_accepted_by_a_second_receiver(client):
    send(client, "sq", [in_session("s", 0)])
    with client.get_queue_receiver("sq", session_id="s") as holder:
        assert holder.session.session_id == "s"
        with pytest.raises(SessionCannotBeLockedError):
            with client.get_queue_receiver("sq", session_id="s") as other:
                other.receive_messages(max_wait_time=1)
    # Released with its receiver: accepted again at once.
    with client.get_queue_receiver("sq", session_id="s") as again:
        assert ids(receive_exactly(again, 1)) == ["s-0"]


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_a_send_without_session_id_is_refused_and_the_sender_goes_on(client):
    with client.get_queue_sender("sq") as sender:
        with pytest.raises(ServiceBusError) as refused:
            sender.send_messages(ServiceBusMessage("no session"), timeout=OPERATION_TIMEOUT_S)
        assert "SessionId" in str(refused.value) and "sq" in str(refused.value)
        sender.send_messages(in_session("s", 0), timeout=OPERATION_TIMEOUT_S)
    with client.get_queue_receiver("sq", session_id="s") as receiver:
        assert ids(receive_exactly(receiver, 1)) == ["s-0"]


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_session_receivers_are_refused_on_queues_without_sessions_and_the_reverse(client):
    with pytest.raises(ServiceBusError):
        with client.get_queue_receiver("plain", session_id="s") as receiver:
            receiver.receive_messages(max_wait_time=1)
    with pytest.raises(ServiceBusError):
        with client.get_queue_receiver("sq") as receiver:
            receiver.receive_messages(max_wait_time=1)


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_session_state_is_kept_past_the_receiver(client):
    with client.get_queue_receiver("sq", session_id="s") as receiver:
        assert receiver.session.get_state(timeout=OPERATION_TIMEOUT_S) is None
        receiver.session.set_state(b"step 2", timeout=OPERATION_TIMEOUT_S)
        assert receiver.session.get_state(timeout=OPERATION_TIMEOUT_S) == b"step 2"
    with client.get_queue_receiver("sq", session_id="s") as receiver:
        assert receiver.session.get_state(timeout=OPERATION_TIMEOUT_S) == b"step 2"
        receiver.session.set_state(None, timeout=OPERATION_TIMEOUT_S)
        assert receiver.session.get_state(timeout=OPERATION_TIMEOUT_S) is None


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_renewal_keeps_a_session_and_expiry_frees_it_with_its_messages(client):
    send(client, "short", [in_session("s", 0), in_session("s", 1)])
    receiver = client.get_queue_receiver("short", session_id="s")
    with receiver:
        first = receive_exactly(receiver, 1)[0]
        assert first.message_id == "s-0"
        before = receiver.session.locked_until_utc
        renewed = receiver.session.renew_lock(timeout=OPERATION_TIMEOUT_S)
        assert renewed >= before
        wait_until_past(renewed)
        with pytest.raises(SessionLockLostError):
            receiver.complete_message(first)
    # The lapsed session is free again; its locked message comes back first, counted.
    with client.get_queue_receiver("short", session_id="s") as again:
        back = receive_exactly(again, 2)
        assert ids(back) == ["s-0", "s-1"]
        assert back[0].delivery_count == 1
        for message in back:
            again.complete_message(message)


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_abandoned_message_comes_back_ahead_of_later_ones(client):
    send(client, "sq", [in_session("s", i) for i in range(3)])
    with client.get_queue_receiver("sq", session_id="s") as receiver:
        first = receive_exactly(receiver, 1)[0]
        receiver.abandon_message(first)
        again = receive_exactly(receiver, 3)
        assert ids(again) == ["s-0", "s-1", "s-2"]
        assert again[0].delivery_count == 1


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_defer_peek_and_receive_by_sequence_number_inside_a_session(client):
    send(client, "sq", [in_session("s", 0), in_session("s", 1), in_session("other", 0)])
    with client.get_queue_receiver("sq", session_id="s") as receiver:
        first, second = receive_exactly(receiver, 2)
        receiver.defer_message(first)
        receiver.complete_message(second)
        # From the start (the SDK peeks past the last received message by default).
        peeked = receiver.peek_messages(
            max_message_count=10, sequence_number=1, timeout=OPERATION_TIMEOUT_S
        )
        assert ids(peeked) == ["s-0"], "only the session's messages"
        (deferred,) = receiver.receive_deferred_messages(
            [first.sequence_number], timeout=OPERATION_TIMEOUT_S
        )
        assert deferred.message_id == "s-0"
        receiver.complete_message(deferred)


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_receive_and_delete_inside_a_session(client):
    send(client, "sq", [in_session("s", i) for i in range(2)])
    with client.get_queue_receiver(
        "sq", session_id="s", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        assert ids(receive_exactly(receiver, 2)) == ["s-0", "s-1"]
    with client.get_queue_receiver("sq", session_id="s") as receiver:
        left = receiver.peek_messages(
            max_message_count=10, sequence_number=1, timeout=OPERATION_TIMEOUT_S
        )
        assert left == []


@pytest.mark.broker(
    topics=[
        {
            "name": "t",
            "subscriptions": [{"name": "ordered", "requires_session": True}, "plain"],
        }
    ]
)
def test_a_topic_copy_keeps_its_session_id(client):
    # A message without a session id is taken by the topic, as Service Bus takes it: the
    # plain subscription delivers its copy and the session-enabled one dead-letters its own
    # ("Session id is null.", Azure/azure-service-bus#196).
    with client.get_topic_sender("t") as sender:
        sender.send_messages([in_session("s", 0), in_session("s", 1)], timeout=OPERATION_TIMEOUT_S)
        sender.send_messages(ServiceBusMessage("none", message_id="none"), timeout=OPERATION_TIMEOUT_S)
    with client.get_subscription_receiver("t", "ordered", session_id="s") as receiver:
        got = receive_exactly(receiver, 2)
        assert ids(got) == ["s-0", "s-1"]
        assert {m.session_id for m in got} == {"s"}
    with client.get_subscription_receiver("t", "plain") as receiver:
        assert ids(receive_exactly(receiver, 3)) == ["s-0", "s-1", "none"]
    with client.get_subscription_receiver(
        "t", "ordered", sub_queue=ServiceBusSubQueue.DEAD_LETTER
    ) as dead_letters:
        (dead,) = receive_exactly(dead_letters, 1)
        assert dead.message_id == "none"
        assert (dead.dead_letter_reason, dead.dead_letter_error_description) == (
            "Session id is null.",
            "Session enabled entity doesn't allow a message whose session identifier is null.",
        )


@pytest.mark.broker(durability="sync", queues=SESSION_QUEUES)
def test_session_state_and_unsettled_session_messages_survive_kill_9(broker):
    client = open_client(broker)
    send(client, "sq", [in_session("s", i) for i in range(3)] + [in_session("t", 0)])
    receiver = client.get_queue_receiver("sq", session_id="s")
    receiver.__enter__()
    receiver.session.set_state(b"after s-0", timeout=OPERATION_TIMEOUT_S)
    first, _unsettled = receive_exactly(receiver, 2)
    receiver.complete_message(first)
    # The broker dies with s-1 locked and unsettled.
    crash(broker, receiver, client)

    broker.start()
    with open_client(broker) as client:
        with client.get_queue_receiver("sq", session_id="s") as receiver:
            assert receiver.session.get_state(timeout=OPERATION_TIMEOUT_S) == b"after s-0"
            back = receive_exactly(receiver, 2)
            assert ids(back) == ["s-1", "s-2"], "the completion held, the lock did not"
            for message in back:
                receiver.complete_message(message)
        with client.get_queue_receiver(
            "sq", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5
        ) as receiver:
            assert receiver.session.session_id == "t"
            assert ids(receive_exactly(receiver, 1)) == ["t-0"]


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_a_scheduled_message_activates_into_its_session(client):
    due = now_utc() + timedelta(seconds=2)
    with client.get_queue_sender("sq") as sender:
        sender.schedule_messages(in_session("s", 0), due, timeout=OPERATION_TIMEOUT_S)
        with pytest.raises(ServiceBusError):
            sender.schedule_messages(ServiceBusMessage("none"), due, timeout=OPERATION_TIMEOUT_S)
    with client.get_queue_receiver("sq", session_id="s") as receiver:
        (message,) = receive_exactly(receiver, 1)
        assert message.message_id == "s-0" and message.session_id == "s"
        assert message.enqueued_time_utc >= due - timedelta(milliseconds=50)
        receiver.complete_message(message)


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_sessions_with_messages_or_state_are_listed(client):
    send(client, "sq", [in_session("a", 0), in_session("b", 0)])
    before = now_utc() - timedelta(seconds=1)
    with client.get_queue_receiver("sq", session_id="c") as receiver:
        receiver.session.set_state(b"kept", timeout=OPERATION_TIMEOUT_S)
    after = now_utc() + timedelta(seconds=1)
    listed = client.list_queue_sessions("sq", timeout=OPERATION_TIMEOUT_S)
    assert sorted(listed) == ["a", "b", "c"]
    updated = client.list_queue_sessions(
        "sq", state_updated_after=before, timeout=OPERATION_TIMEOUT_S
    )
    assert list(updated) == ["c"]
    later = client.list_queue_sessions("sq", state_updated_after=after, timeout=OPERATION_TIMEOUT_S)
    assert list(later) == []
    assert list(client.list_queue_sessions("plain", timeout=OPERATION_TIMEOUT_S)) == []


@pytest.mark.broker(queues=SESSION_QUEUES)
def test_a_receiver_without_a_session_is_refused_when_it_opens(client):
    # Refused at the attach, as Service Bus refuses it: the SDK's open fails, rather than
    # succeeding and losing the link a moment later.
    started = time.monotonic()
    with pytest.raises(ServiceBusError, match="requires sessions"):
        with client.get_queue_receiver("sq", max_wait_time=5):
            pass
    # A session id that is not a string is refused at once, not waited on as "any session".
    with pytest.raises(ServiceBusError, match="session filter"):
        with client.get_queue_receiver("sq", session_id=1, max_wait_time=5) as receiver:
            receiver.receive_messages(max_wait_time=5)
    assert time.monotonic() - started < OPERATION_TIMEOUT_S
