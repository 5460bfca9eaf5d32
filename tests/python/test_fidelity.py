"""What the official `azure-servicebus` SDK sends and expects where its own live suite (the tests
Microsoft runs against real namespaces) found Tidebus stricter or otherwise than Service Bus
(issue 31): messages re-sent as received, every section kind of an `AmqpAnnotatedMessage`, the
delivery tag of a receive-and-delete message, and the management operations the suite uses.

Each test runs its own broker and client (conftest.py); every wait is bounded.
"""

import logging
import warnings
from datetime import timedelta

import pytest
from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType, AmqpMessageHeader
from azure.servicebus._common import mgmt_handlers
from azure.servicebus.exceptions import MessageNotFoundError, ServiceBusError, SessionLockLostError

from sb_common import (
    OPERATION_TIMEOUT_S,
    assert_only_marker_left,
    body_of,
    now_utc,
    open_client,
    properties_of,
    receive_exactly,
    receive_one,
    send,
    text,
)


def test_a_received_message_is_sent_and_scheduled_again_as_it_is(client):
    # pyamqp writes a received message's delivery annotations (its lock token) after the
    # footer; Service Bus takes sections in any order.
    send(client, "q1", ServiceBusMessage("again", message_id="m1", application_properties={"k": 1}))

    with client.get_queue_receiver("q1") as receiver, client.get_queue_sender("q1") as sender:
        original = receive_one(receiver)
        sender.send_messages(original, timeout=OPERATION_TIMEOUT_S)
        (scheduled,) = sender.schedule_messages(original, now_utc(), timeout=OPERATION_TIMEOUT_S)
        receiver.complete_message(original)

        copies = receive_exactly(receiver, 2)
        for copy in copies:
            assert (copy.message_id, body_of(copy), properties_of(copy)) == ("m1", "again", {"k": 1})
            assert copy.sequence_number != original.sequence_number
            assert copy.lock_token != original.lock_token, "a lock token the client sent came back"
        assert scheduled in [copy.sequence_number for copy in copies]
        for copy in copies:
            receiver.complete_message(copy)
    # A received message carries its lock's end (and its state): the copy sent from it shows
    # the broker's alone, here none, as a receive-and-delete delivery has no lock.
    send(client, "q1", ServiceBusMessage("plain", message_id="plain"))
    with client.get_queue_sender("q1") as sender:
        with client.get_queue_receiver("q1") as receiver:
            received = receive_one(receiver)
            sender.send_messages(received, timeout=OPERATION_TIMEOUT_S)
            receiver.complete_message(received)
    with client.get_queue_receiver("q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
        again = receive_one(receiver)
        assert again.message_id == "plain"
        assert b"x-opt-locked-until" not in again.raw_amqp_message.annotations
        assert again.state == ServiceBusMessageState.ACTIVE
    assert_only_marker_left(client, "q1")


def test_every_section_kind_of_an_annotated_message_arrives(client):
    data = AmqpAnnotatedMessage(
        data_body=[b"aa", b"bb"],
        delivery_annotations={"delann_key": "delann_value"},
        application_properties={"body_type": "data"},
        footer={"footer_key": "footer_value"},
    )
    sequence = AmqpAnnotatedMessage(
        sequence_body=[b"message", 123.456, True],
        properties={"subject": "sequence"},
        application_properties={"body_type": "sequence"},
        footer={"footer_key": "footer_value"},
    )
    value = AmqpAnnotatedMessage(
        value_body={b"key": [-123, b"data", False]},
        header=AmqpMessageHeader(priority=10),
        annotations={"ann_key": "ann_value"},
        application_properties={"body_type": "value"},
    )
    send(client, "q1", [data, sequence, value])

    with client.get_queue_receiver("q1") as receiver:
        received = {}
        for message in receive_exactly(receiver, 3):
            raw = message.raw_amqp_message
            received[text(raw.application_properties[b"body_type"])] = raw
            assert message.lock_token, "the broker's lock token is missing"
            receiver.complete_message(message)

    assert received["data"].body_type == AmqpMessageBodyType.DATA
    assert list(received["data"].body) == [b"aa", b"bb"]
    # The sender's delivery annotations reach the receiver beside the broker's lock token.
    assert received["data"].delivery_annotations[b"delann_key"] == b"delann_value"
    assert b"x-opt-lock-token" in received["data"].delivery_annotations
    assert received["data"].footer[b"footer_key"] == b"footer_value"
    assert received["sequence"].body_type == AmqpMessageBodyType.SEQUENCE
    assert list(received["sequence"].body) == [[b"message", 123.456, True]]
    assert received["sequence"].properties.subject == b"sequence"
    assert received["value"].body == {b"key": [-123, b"data", False]}
    assert received["value"].header.priority == 10
    assert received["value"].annotations[b"ann_key"] == b"ann_value"


def test_a_receive_and_delete_message_has_an_empty_delivery_tag(client):
    send(client, "q1", ServiceBusMessage("settled", time_to_live=timedelta(seconds=30)))

    with client.get_queue_receiver("q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
        message = receive_one(receiver)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            legacy = message.message
        # Service Bus sends pre-settled deliveries with an empty tag, which the SDK reads as none.
        assert legacy.delivery_tag is None
        assert legacy.settled
        assert legacy.delivery_annotations == {}
        assert sorted(legacy.annotations) == [b"x-opt-enqueued-time", b"x-opt-sequence-number"]


def defer_one(client, queue, message_id):
    """Send a message and defer it; returns its sequence number."""
    send(client, queue, ServiceBusMessage(message_id, message_id=message_id))
    with client.get_queue_receiver(queue) as receiver:
        message = receive_one(receiver)
        receiver.defer_message(message)
    return message.sequence_number


def test_a_deferred_message_asked_for_twice_is_received_once(client):
    seq = defer_one(client, "q1", "twice")

    with client.get_queue_receiver("q1", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
        received = receiver.receive_deferred_messages([seq, seq], timeout=OPERATION_TIMEOUT_S)
    assert [message.message_id for message in received] == ["twice"]


def test_receiving_deferred_messages_takes_all_or_none(client):
    seq = defer_one(client, "q1", "kept")

    for mode in (ServiceBusReceiveMode.PEEK_LOCK, ServiceBusReceiveMode.RECEIVE_AND_DELETE):
        with client.get_queue_receiver("q1", receive_mode=mode) as receiver:
            with pytest.raises(MessageNotFoundError):
                receiver.receive_deferred_messages([seq, seq + 1000], timeout=OPERATION_TIMEOUT_S)
    # Neither refusal took the message that was there: it is still deferred and unlocked.
    with client.get_queue_receiver("q1") as receiver:
        (message,) = receiver.receive_deferred_messages([seq], timeout=OPERATION_TIMEOUT_S)
        assert message.message_id == "kept"
        receiver.complete_message(message)


def test_a_dead_letter_keeps_the_delivery_count_it_had(client):
    # Dead-lettering settles the message: only an abandon, a deferral or a lapsed lock counts a
    # delivery (as the JavaScript SDK's live suites assert against Service Bus).
    send(client, "q1", ServiceBusMessage("dead", message_id="dead"))
    with client.get_queue_receiver("q1") as receiver:
        message = receive_one(receiver)
        assert message.delivery_count == 0
        receiver.dead_letter_message(message, reason="r", error_description="d")
    with client.get_queue_receiver("q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver:
        dead = receive_one(receiver)
        assert dead.delivery_count == 0
        receiver.complete_message(dead)


def test_a_peeked_locked_message_shows_until_when(client):
    send(client, "q1", ServiceBusMessage("locked", message_id="locked"))
    with client.get_queue_receiver("q1") as receiver:
        message = receive_one(receiver)
        # The SDK peeks after the last number it received unless told where to start.
        (peeked,) = receiver.peek_messages(
            max_message_count=1, sequence_number=message.sequence_number, timeout=OPERATION_TIMEOUT_S
        )
        assert peeked.message_id == "locked"
        assert peeked.locked_until_utc == message.locked_until_utc
        receiver.complete_message(message)


@pytest.mark.broker(
    queues=[
        {"name": "work", "forward_to": "middle", "forward_dead_lettered_messages_to": "errors"},
        {"name": "middle", "forward_to": "done"},
        "done",
        "errors",
        {"name": "dead", "forward_dead_lettered_messages_to": "errors"},
    ]
)
def test_forwarded_messages_carry_their_first_number_and_dead_letter_source(client):
    send(client, "work", ServiceBusMessage("on", message_id="on"))
    with client.get_queue_receiver("done") as receiver:
        moved = receive_one(receiver)
        # Two hops: the number is the one "work" gave it.
        assert moved.enqueued_sequence_number == 1
        assert moved.dead_letter_source is None
        receiver.complete_message(moved)

    send(client, "dead", ServiceBusMessage("off", message_id="off"))
    with client.get_queue_receiver("dead") as receiver:
        receiver.dead_letter_message(receive_one(receiver), reason="r")
    with client.get_queue_receiver("errors") as receiver:
        errored = receive_one(receiver)
        assert errored.message_id == "off"
        assert errored.dead_letter_source == "dead"
        assert errored.enqueued_sequence_number == 1
        assert errored.dead_letter_reason == "r"
        receiver.complete_message(errored)


def batch_delete(receiver, count, before):
    """`com.microsoft:batch-delete-messages` as azure-servicebus 7.13.0b1's `delete_messages`
    sent it (the GA 7.15 has no such call), through the receiver's own management link: how
    many messages enqueued before `before` the broker deleted, or its refusal raised as the
    SDK raises any."""

    def answered(status_code, message, description, amqp_transport):
        if status_code == 200:
            return message.value[b"message-count"]
        if status_code in (202, 204):
            return 0
        condition = message.application_properties.get(b"error-condition")
        amqp_transport.handle_amqp_mgmt_error(
            logging.getLogger(__name__), "Batch delete failed.", condition, description, status_code
        )

    return receiver._mgmt_request_response_with_retry(
        b"com.microsoft:batch-delete-messages",
        {"enqueued-time-utc": before, "message-count": count},
        answered,
        timeout=OPERATION_TIMEOUT_S,
    )


def test_batch_delete_takes_the_oldest_unlocked_messages_up_to_the_count(client):
    send(client, "q1", [ServiceBusMessage(f"m{index}", message_id=f"m{index}") for index in range(5)])
    cutoff = now_utc()
    send(client, "q1", ServiceBusMessage("late", message_id="late"))

    with client.get_queue_receiver("q1") as receiver:
        locked = receive_one(receiver)
        assert locked.message_id == "m0"
        assert batch_delete(receiver, 2, cutoff) == 2  # m1, m2: m0 is locked
        assert batch_delete(receiver, 4000, cutoff) == 2  # m3, m4: "late" came after the cutoff
        assert batch_delete(receiver, 4000, cutoff) == 0  # 204, which the SDKs read as none
        receiver.complete_message(locked)
        left = receive_one(receiver)
        assert left.message_id == "late"
        receiver.complete_message(left)
    assert_only_marker_left(client, "q1")
    with client.get_queue_receiver("q1") as receiver:
        with pytest.raises(ServiceBusError, match="message-count must be from 1 to 4000"):
            batch_delete(receiver, 4001, now_utc())


def test_one_peek_returns_at_most_250_messages(client):
    send(client, "q1", [ServiceBusMessage(f"p{index}") for index in range(260)])
    with client.get_queue_receiver("q1") as receiver:
        first = receiver.peek_messages(max_message_count=1000, timeout=OPERATION_TIMEOUT_S)
        assert len(first) == 250
        rest = receiver.peek_messages(max_message_count=1000, timeout=OPERATION_TIMEOUT_S)
        assert [text(b"".join(m.body)) for m in rest] == [f"p{index}" for index in range(250, 260)]


@pytest.mark.broker(queues=[{"name": "sq", "requires_session": True}])
def test_only_the_connection_holding_a_session_reads_sets_or_renews_it(broker):
    # The SDK only asks about its own session; another client's request is sent as the SDK
    # sends its own, through that client's session receiver's management link.
    requests = [
        (b"com.microsoft:get-session-state", {"session-id": "mine"}),
        (b"com.microsoft:set-session-state", {"session-id": "mine", "session-state": b"theirs"}),
        (b"com.microsoft:renew-session-lock", {"session-id": "mine"}),
    ]
    with open_client(broker) as holder, open_client(broker) as stranger:
        with holder.get_queue_receiver("sq", session_id="mine") as mine:
            mine.session.set_state("kept", timeout=OPERATION_TIMEOUT_S)
            for index, (operation, body) in enumerate(requests):
                with stranger.get_queue_receiver("sq", session_id=f"other-{index}") as other:
                    with pytest.raises(SessionLockLostError):
                        other._mgmt_request_response_with_retry(
                            operation, body, mgmt_handlers.default, timeout=OPERATION_TIMEOUT_S
                        )
            assert mine.session.get_state(timeout=OPERATION_TIMEOUT_S) == b"kept"
            mine.session.renew_lock(timeout=OPERATION_TIMEOUT_S)
