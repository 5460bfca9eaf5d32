"""Duplicate detection with the official azure-servicebus SDK (issue 19).

A queue or topic with `requires_duplicate_detection = true` keeps one copy of the messages sent
with one `message_id` within its `duplicate_detection_history_time_window`; the repeats are
acknowledged (the sender sees a normal send) and dropped. The tests show "one copy" without
waiting for a receive to time out: after the expected messages, a marker sent last must be the
next one a fresh receiver gets (`assert_only_marker_left`).
"""

import asyncio
import uuid
from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from sb_common import (
    OPERATION_TIMEOUT_S,
    RECEIVE_WAIT_S,
    assert_only_marker_left,
    body_of,
    connection_string,
    crash,
    now_utc,
    open_client,
    receive_exactly,
    send,
    wait_until_past,
)

WINDOW = timedelta(seconds=2)
DETECTING = {
    "name": "dedup",
    "requires_duplicate_detection": True,
    "duplicate_detection_history_time_window": "2s",
}
PLAIN = {"name": "plain"}


def bodies_received(client, queue, count):
    """Receive and complete `count` messages of `queue`; returns their bodies."""
    with client.get_queue_receiver(queue) as receiver:
        received = receive_exactly(receiver, count)
        for message in received:
            receiver.complete_message(message)
    return [body_of(message) for message in received]


@pytest.mark.broker(queues=[DETECTING])
def test_five_sends_with_one_uuid_message_id_arrive_once(client):
    # The SDK's own test_queue_message_duplicate_detection: five sends of one UUID id, then a
    # receiver iterated until it is idle gets one message, with that id.
    message_id = uuid.uuid4()
    with client.get_queue_sender("dedup") as sender:
        for i in range(5):
            message = ServiceBusMessage(str(i))
            message.message_id = message_id
            sender.send_messages(message, timeout=OPERATION_TIMEOUT_S)
    count = 0
    with client.get_queue_receiver("dedup", max_wait_time=RECEIVE_WAIT_S) as receiver:
        for message in receiver:
            assert message.message_id == message_id
            assert body_of(message) == "0", "the first send is the one kept"
            receiver.complete_message(message)
            count += 1
    assert count == 1


@pytest.mark.broker(queues=[DETECTING])
def test_five_sends_with_one_uuid_message_id_arrive_once_async(broker):
    # The same test with the SDK's asyncio client (its test_async_queue_message_duplicate_detection).
    async def run():
        message_id = uuid.uuid4()
        client = AsyncServiceBusClient.from_connection_string(
            connection_string(broker), retry_total=0, try_timeout=OPERATION_TIMEOUT_S
        )
        async with client:
            async with client.get_queue_sender("dedup") as sender:
                for i in range(5):
                    message = ServiceBusMessage(str(i))
                    message.message_id = message_id
                    await sender.send_messages(message, timeout=OPERATION_TIMEOUT_S)
            count = 0
            async with client.get_queue_receiver(
                "dedup", max_wait_time=RECEIVE_WAIT_S
            ) as receiver:
                async for message in receiver:
                    assert message.message_id == message_id
                    await receiver.complete_message(message)
                    count += 1
        return count

    assert asyncio.run(run()) == 1


@pytest.mark.broker(queues=[DETECTING, PLAIN])
def test_a_repeat_inside_the_window_is_dropped_and_one_after_it_is_kept(client):
    send(client, "dedup", ServiceBusMessage("first", message_id="order-1"))
    sent = now_utc()
    send(client, "dedup", ServiceBusMessage("retry", message_id="order-1"))
    send(client, "plain", ServiceBusMessage("first", message_id="order-1"))
    send(client, "plain", ServiceBusMessage("retry", message_id="order-1"))
    assert bodies_received(client, "dedup", 1) == ["first"]
    assert_only_marker_left(client, "dedup")
    assert bodies_received(client, "plain", 2) == ["first", "retry"], "no detection, both kept"

    wait_until_past(sent + WINDOW)
    send(client, "dedup", ServiceBusMessage("later", message_id="order-1"))
    assert bodies_received(client, "dedup", 1) == ["later"], "the window has passed"


@pytest.mark.broker(queues=[DETECTING])
def test_a_batch_with_an_internal_duplicate_stores_it_once(client):
    with client.get_queue_sender("dedup") as sender:
        batch = sender.create_message_batch()
        for body, message_id in [("a", "x"), ("b", "y"), ("a again", "x")]:
            batch.add_message(ServiceBusMessage(body, message_id=message_id))
        sender.send_messages(batch, timeout=OPERATION_TIMEOUT_S)
        sender.send_messages(
            [ServiceBusMessage("c", message_id="z"), ServiceBusMessage("b again", message_id="y")],
            timeout=OPERATION_TIMEOUT_S,
        )
    assert bodies_received(client, "dedup", 3) == ["a", "b", "c"]
    assert_only_marker_left(client, "dedup")


@pytest.mark.broker(queues=[DETECTING])
def test_a_scheduled_repeat_answers_the_first_ones_sequence_number(client):
    due = now_utc() + timedelta(hours=1)
    with client.get_queue_sender("dedup") as sender:
        first = sender.schedule_messages(
            ServiceBusMessage("once", message_id="s"), due, timeout=OPERATION_TIMEOUT_S
        )
        again = sender.schedule_messages(
            ServiceBusMessage("twice", message_id="s"), due, timeout=OPERATION_TIMEOUT_S
        )
        assert again == first
    with client.get_queue_receiver("dedup") as receiver:
        peeked = receiver.peek_messages(max_message_count=10, timeout=OPERATION_TIMEOUT_S)
    assert [body_of(m) for m in peeked] == ["once"]
    with client.get_queue_sender("dedup") as sender:
        sender.cancel_scheduled_messages(again, timeout=OPERATION_TIMEOUT_S)
    assert_only_marker_left(client, "dedup")


@pytest.mark.broker(
    topics=[
        {
            "name": "t",
            "requires_duplicate_detection": True,
            "duplicate_detection_history_time_window": "2s",
            "subscriptions": ["s"],
        }
    ]
)
def test_a_topic_detects_duplicates_before_its_subscriptions_copy(client):
    with client.get_topic_sender("t") as sender:
        for body in ["first", "retry"]:
            sender.send_messages(
                ServiceBusMessage(body, message_id="event-1"), timeout=OPERATION_TIMEOUT_S
            )
        sender.send_messages(ServiceBusMessage("marker", message_id="m"), timeout=OPERATION_TIMEOUT_S)
    with client.get_subscription_receiver("t", "s") as receiver:
        received = receive_exactly(receiver, 2)
    assert [body_of(m) for m in received] == ["first", "marker"]


@pytest.mark.broker(
    durability="sync", queues=[dict(DETECTING, duplicate_detection_history_time_window="10m")]
)
def test_a_retry_after_kill_9_and_a_restart_is_still_dropped(broker):
    client = open_client(broker)
    send(client, "dedup", ServiceBusMessage("acknowledged", message_id="payment-7"))
    crash(broker, client)

    broker.start()
    with open_client(broker) as client:
        send(client, "dedup", ServiceBusMessage("retry", message_id="payment-7"))
        assert bodies_received(client, "dedup", 1) == ["acknowledged"]
        assert_only_marker_left(client, "dedup")
