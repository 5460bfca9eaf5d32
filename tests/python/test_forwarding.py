"""Auto-forwarding (`forward_to`, `forward_dead_lettered_messages_to`) through the official
SDK: every message that arrives in a forwarding queue or subscription moves to its target,
dead letters move to theirs, receivers of a forwarding queue are refused, a loop is allowed
but no message moves more than four times, and a crash while forwarding loses nothing.
"""

import time

import pytest
from azure.core.exceptions import HttpResponseError
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError

from sb_common import (
    DEADLINE_S,
    RECEIVE_WAIT_S,
    assert_only_marker_left,
    crash,
    expected_summary,
    numbered,
    open_client,
    receive_exactly,
    receive_one,
    send,
    summary,
)
from test_admin import admin, secured  # noqa: F401 (a fixture, and the client it needs)

TRANSFER_DEAD_LETTER = ServiceBusSubQueue.TRANSFER_DEAD_LETTER


@pytest.mark.broker(queues=[{"name": "in", "forward_to": "OUT"}, "out"])
def test_a_queue_forwards_every_message_to_its_target(client):
    send(client, "in", [numbered("fw", i) for i in range(20)])
    with client.get_queue_receiver("out") as receiver:
        received = receive_exactly(receiver, 20)
        assert [summary(m) for m in received] == [expected_summary("fw", i) for i in range(20)]
        # The target numbers them itself.
        assert [m.sequence_number for m in received] == list(range(1, 21))
        for message in received:
            receiver.complete_message(message)


@pytest.mark.broker(
    queues=["collected"],
    topics=[{"name": "events", "subscriptions": [{"name": "all", "forward_to": "collected"}]}],
)
def test_a_subscription_forwards_to_a_queue(client):
    with client.get_topic_sender("events") as sender:
        sender.send_messages([numbered("ev", i) for i in range(5)])
    with client.get_queue_receiver("collected") as receiver:
        received = receive_exactly(receiver, 5)
        assert [summary(m) for m in received] == [expected_summary("ev", i) for i in range(5)]


@pytest.mark.broker(queues=[{"name": "work", "forward_dead_lettered_messages_to": "errors"}, "errors"])
def test_dead_letters_move_to_the_error_queue_with_their_reason(client):
    send(client, "work", numbered("job", 1))
    with client.get_queue_receiver("work") as receiver:
        receiver.dead_letter_message(receive_one(receiver), reason="Bad", error_description="why")
    with client.get_queue_receiver("errors") as receiver:
        dead = receive_one(receiver)
        assert summary(dead)[:2] == expected_summary("job", 1)[:2]
        assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("Bad", "why")
        receiver.complete_message(dead)
    # A dead-letter queue that forwards takes no receivers either.
    with pytest.raises(ServiceBusError, match="auto-forwarding"):
        with client.get_queue_receiver("work", sub_queue="deadletter") as receiver:
            receiver.receive_messages(max_wait_time=RECEIVE_WAIT_S)


@pytest.mark.broker(
    queues=[{"name": "in", "forward_to": "hub"}, "out"],
    topics=[{"name": "hub", "subscriptions": [{"name": "s", "forward_to": "out"}]}],
)
def test_a_two_hop_chain_through_a_topic(client):
    send(client, "in", [numbered("hop", i) for i in range(3)])
    with client.get_queue_receiver("out") as receiver:
        received = receive_exactly(receiver, 3)
        assert [summary(m) for m in received] == [expected_summary("hop", i) for i in range(3)]


@pytest.mark.broker(queues=[{"name": "in", "forward_to": "out"}, "out"])
def test_a_receiver_of_a_forwarding_queue_is_refused(client):
    with pytest.raises(ServiceBusError) as refused:
        with client.get_queue_receiver("in") as receiver:
            receiver.receive_messages(max_wait_time=RECEIVE_WAIT_S)
    assert "auto-forwarding" in str(refused.value), repr(refused.value)
    # Its dead-letter queue stays receivable.
    with client.get_queue_receiver("in", sub_queue="deadletter") as receiver:
        assert receiver.receive_messages(max_wait_time=1) == []


@pytest.mark.broker(
    queues=[{"name": "orders", "forward_to": "audit"}, {"name": "audit", "forward_to": "Orders"}]
)
def test_a_loop_forwards_a_message_four_times_then_dead_letters_it(client):
    send(client, "orders", numbered("loop", 1))
    # orders → audit → orders → audit → orders: four moves; the fifth is refused, in orders.
    with client.get_queue_receiver("orders", sub_queue=TRANSFER_DEAD_LETTER) as receiver:
        dead = receive_one(receiver)
        assert summary(dead)[:2] == expected_summary("loop", 1)[:2]
        assert dead.dead_letter_reason == "MaxTransferHopCountExceeded"
        assert "maximum number of allowed hops" in dead.dead_letter_error_description
        assert dead.raw_amqp_message.annotations[b"x-opt-transfer-hop-count"] == 4
        receiver.complete_message(dead)
    send(client, "audit", numbered("loop", 2))
    with client.get_queue_receiver("audit", sub_queue=TRANSFER_DEAD_LETTER) as receiver:
        assert summary(receive_one(receiver))[:2] == expected_summary("loop", 2)[:2]


@pytest.mark.broker(
    topics=[{"name": "t", "subscriptions": [{"name": "again", "forward_to": "t"}, "kept"]}]
)
def test_a_subscription_forwarding_to_its_own_topic_stops_after_four_moves(client):
    with client.get_topic_sender("t") as sender:
        sender.send_messages(numbered("echo", 1))
    # "kept" has the message as sent and after each of the four moves through "again".
    with client.get_subscription_receiver("t", "kept") as receiver:
        copies = receive_exactly(receiver, 5)
        hops = [m.raw_amqp_message.annotations.get(b"x-opt-transfer-hop-count") for m in copies]
        assert hops == [None, 1, 2, 3, 4], hops
    with client.get_queue_receiver("t", sub_queue=TRANSFER_DEAD_LETTER) as receiver:
        dead = receive_one(receiver)
        assert dead.dead_letter_reason == "MaxTransferHopCountExceeded"
        assert dead.raw_amqp_message.annotations[b"x-opt-transfer-hop-count"] == 4
        assert receiver.receive_messages(max_wait_time=RECEIVE_WAIT_S) == []


def test_the_administration_api_forwards_allows_loops_and_refuses_missing_targets(secured):  # noqa: F811
    with admin(secured) as client:
        client.create_queue("sink")
        client.create_queue("source", forward_to="sink", forward_dead_lettered_messages_to="sink")
        properties = client.get_queue("source")
        # Read back as Service Bus writes it: the target's address in the namespace dialled.
        address = f"sb://localhost:{secured.admin_port}/sink"
        assert properties.forward_to == address, properties.forward_to
        assert properties.forward_dead_lettered_messages_to == address
        client.update_queue(properties)
        assert client.get_queue("source").forward_to == address, "sent back as read"
        relay = client.create_queue("relay", forward_to="sink", forward_dead_lettered_messages_to="sink")
        relay.forward_to = None
        client.update_queue(relay)
        stopped = client.get_queue("relay")
        assert stopped.forward_to is None, "left out of the description: removed"
        assert stopped.forward_dead_lettered_messages_to == address
        with pytest.raises(HttpResponseError) as refused:
            client.create_queue("stray", forward_to="nowhere")
        assert refused.value.status_code == 400
        assert "'nowhere' does not exist" in str(refused.value), str(refused.value)
        # A loop is Service Bus's to allow: each message is bounded at four moves instead.
        sink = client.get_queue("sink")
        sink.forward_to = "source"
        client.update_queue(sink)
        assert client.get_queue("sink").forward_to == f"sb://localhost:{secured.admin_port}/source"
        sink.forward_to = None
        client.update_queue(sink)
    with open_client(secured) as sb:
        send(sb, "source", numbered("adm", 1))
        with sb.get_queue_receiver("sink") as receiver:
            assert summary(receive_one(receiver)) == expected_summary("adm", 1)


@pytest.mark.broker(
    durability="sync",
    queues=[
        {"name": "in", "forward_to": "out"},
        {"name": "out", "requires_duplicate_detection": True},
    ],
)
def test_a_crash_while_forwarding_loses_nothing_and_the_target_drops_repeats(broker):
    # The source deletes a message only after the target stored it, so a crash in between
    # forwards it again after the restart: the target's duplicate detection drops the repeat.
    count = 3000
    with open_client(broker) as client:
        with client.get_queue_sender("in") as sender:
            for start in range(0, count, 250):
                sender.send_messages([ServiceBusMessage(f"m{i}", message_id=f"m-{i}")
                                      for i in range(start, start + 250)])
    broker.kill9()
    broker.start()
    received = []
    deadline = time.monotonic() + 4 * DEADLINE_S
    with open_client(broker) as client:
        with client.get_queue_receiver(
            "out", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, prefetch_count=500
        ) as receiver:
            while len(received) < count and time.monotonic() < deadline:
                batch = receiver.receive_messages(max_message_count=500, max_wait_time=RECEIVE_WAIT_S)
                received += [m.message_id for m in batch]
        missing = {f"m-{i}" for i in range(count)} - set(received)
        assert not missing, f"{len(missing)} messages lost, e.g. {sorted(missing)[:5]}"
        assert len(received) == count, f"{len(received) - count} repeats reached the target"
        assert_only_marker_left(client, "out", ServiceBusReceiveMode.RECEIVE_AND_DELETE)


@pytest.mark.broker(
    durability="sync",
    queues=[{"name": "in"}, {"name": "out", "requires_duplicate_detection": True}],
)
def test_messages_a_crash_left_in_both_places_reach_the_target_once(broker):
    # The state a crash between the target's store and the source's delete leaves: the target
    # holds some of the messages (or held them: half were received already), the source all.
    # After the restart the source forwards them all again; the target drops the repeats.
    count = 200
    messages = lambda ids: [ServiceBusMessage(f"m{i}", message_id=f"m-{i}") for i in ids]
    client = open_client(broker)
    send(client, "in", messages(range(count)))
    send(client, "out", messages(range(count // 2)))
    with client.get_queue_receiver("out") as receiver:
        for message in receive_exactly(receiver, count // 4):
            receiver.complete_message(message)
    crash(broker, client)
    broker.queues = [{"name": "in", "forward_to": "out"}, broker.queues[1]]
    broker.start()
    with open_client(broker) as client:
        with client.get_queue_receiver("out") as receiver:
            left = receive_exactly(receiver, count - count // 4)
            for message in left:
                receiver.complete_message(message)
        expected = [f"m-{i}" for i in range(count // 4, count)]
        assert sorted(m.message_id for m in left) == sorted(expected)
        assert_only_marker_left(client, "out")
