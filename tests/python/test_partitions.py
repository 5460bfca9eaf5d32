"""Partitioned queues and topics with the official azure-servicebus SDK (issue 34).

A partitioned entity is one actor per partition (design.md D9). What a client sees: sequence
numbers carry the partition in their top 16 bits and are gap-free per partition; a message with
a session id or partition key always lands in that key's partition; a receiver gets every
partition's messages; settlement, renewal, deferral, scheduling and peek find the partition from
the number or the lock token.
"""

import threading
import urllib.request
from collections import defaultdict
from datetime import timedelta

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError

from sb_common import (
    OPERATION_TIMEOUT_S,
    RECEIVE_WAIT_S,
    body_of,
    crash,
    now_utc,
    open_client,
    receive_exactly,
)

PARTITIONS = 4
QUEUE = {"name": "pq", "partitions": PARTITIONS}
SESSIONS = {"name": "psq", "partitions": PARTITIONS, "requires_session": True}
TOPIC = {
    "name": "pt",
    "partitions": PARTITIONS,
    "subscriptions": [
        "all",
        {"name": "red", "rules": [{"name": "red", "sql": "colour = 'red'"}]},
    ],
}


def partition_of(sequence_number):
    return sequence_number >> 48


def number_in_partition(sequence_number):
    return sequence_number & ((1 << 48) - 1)


def send_each(client, queue, sends):
    """Send each item of `sends` (a message or a list) on its own, through one sender."""
    with client.get_queue_sender(queue) as sender:
        for item in sends:
            sender.send_messages(item, timeout=OPERATION_TIMEOUT_S)


def drain(receiver, expected):
    """Receive and complete until `expected` messages came; their bodies by sequence number."""
    received = receive_exactly(receiver, expected)
    for message in received:
        receiver.complete_message(message)
    return {message.sequence_number: body_of(message) for message in received}


def partition_metrics(broker, entity):
    """`tidebus_partition_messages` of `entity` from `/metrics`, by partition."""
    url = f"http://127.0.0.1:{broker.admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=OPERATION_TIMEOUT_S) as response:
        text = response.read().decode()
    held = {}
    for line in text.splitlines():
        if line.startswith("tidebus_partition_messages{") and f'entity="{entity}"' in line:
            labels, value = line.rsplit(" ", 1)
            partition = labels.split('partition="')[1].split('"')[0]
            held[partition] = int(value)
    return held


@pytest.mark.broker(queues=[QUEUE])
def test_plain_sends_spread_over_the_partitions_numbered_gap_free_in_each(broker, client):
    send_each(client, "pq", [[ServiceBusMessage("batch")]])
    send_each(client, "pq", [ServiceBusMessage(f"m{index}") for index in range(39)])
    held = partition_metrics(broker, "pq")
    assert sorted(held) == [str(p) for p in range(PARTITIONS)] and sum(held.values()) == 40
    with client.get_queue_receiver("pq", prefetch_count=20) as receiver:
        received = drain(receiver, 40)
    numbers = defaultdict(list)
    for sequence_number in received:
        numbers[partition_of(sequence_number)].append(number_in_partition(sequence_number))
    assert sorted(numbers) == list(range(PARTITIONS)), "every partition took a share"
    for partition, taken in numbers.items():
        assert sorted(taken) == list(range(1, len(taken) + 1)), f"gap-free in {partition}"
    assert sorted(received.values()) == sorted(["batch"] + [f"m{i}" for i in range(39)])


@pytest.mark.broker(queues=[QUEUE])
def test_a_receiver_asking_for_one_message_at_a_time_gets_each_once(client):
    # Credit 1 over 4 partitions: each may send one, the extras go back untouched.
    send_each(client, "pq", [ServiceBusMessage(f"m{index}") for index in range(12)])
    seen = []
    with client.get_queue_receiver("pq") as receiver:
        while len(seen) < 12:
            (message,) = receive_exactly(receiver, 1)
            assert message.delivery_count == 0, "a message given back counts no delivery"
            seen.append(body_of(message))
            receiver.complete_message(message)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
    assert sorted(seen) == sorted(f"m{i}" for i in range(12))


@pytest.mark.broker(queues=[QUEUE, SESSIONS])
def test_keys_pick_one_partition_and_a_key_unlike_the_session_id_is_refused(client):
    send_each(client, "pq", [ServiceBusMessage(f"k{i}", partition_key="orders") for i in range(6)])
    send_each(client, "psq", [ServiceBusMessage(f"s{i}", session_id="cart-7") for i in range(6)])
    with client.get_queue_receiver("pq") as receiver:
        received = drain(receiver, 6)
    assert len({partition_of(n) for n in received}) == 1, "one key, one partition"
    assert [received[n] for n in sorted(received)] == [f"k{i}" for i in range(6)]
    with client.get_queue_receiver("psq", session_id="cart-7") as receiver:
        ordered = receive_exactly(receiver, 6)
        assert [body_of(m) for m in ordered] == [f"s{i}" for i in range(6)], "session order"
        assert len({partition_of(m.sequence_number) for m in ordered}) == 1
        for message in ordered:
            receiver.complete_message(message)
    # The SDK refuses the mismatch itself; one set past its check reaches the broker.
    mismatched = ServiceBusMessage("bad", session_id="a")
    mismatched.raw_amqp_message.annotations[b"x-opt-partition-key"] = "b"
    with pytest.raises(ServiceBusError, match="PartitionKey 'b'"):
        send_each(client, "psq", [mismatched])
    first, second = keys_in_two_partitions(client)
    with client.get_queue_sender("pq") as sender:
        batch = sender.create_message_batch()
        batch.add_message(ServiceBusMessage("one", partition_key=first))
        batch.add_message(ServiceBusMessage("two", partition_key=second))
        with pytest.raises(ServiceBusError, match="distinct SessionId or PartitionKey"):
            sender.send_messages(batch, timeout=OPERATION_TIMEOUT_S)


def keys_in_two_partitions(client):
    """Two partition keys that land in different partitions (found by sending probes)."""
    keys = [f"key-{i}" for i in range(8)]
    send_each(client, "pq", [ServiceBusMessage(key, partition_key=key) for key in keys])
    with client.get_queue_receiver("pq") as receiver:
        probes = drain(receiver, len(keys))
    by_partition = {partition_of(n): body for n, body in probes.items()}
    assert len(by_partition) > 1, "8 keys in one partition of 4"
    first, second = list(by_partition.values())[:2]
    return first, second


@pytest.mark.broker(queues=[QUEUE])
def test_peek_ascends_across_partitions_and_pages_on(client):
    send_each(client, "pq", [ServiceBusMessage(f"p{index}") for index in range(30)])
    peeked = []
    with client.get_queue_receiver("pq") as receiver:
        while True:
            page = receiver.peek_messages(max_message_count=7, timeout=OPERATION_TIMEOUT_S)
            if not page:
                break
            peeked += page
    numbers = [message.sequence_number for message in peeked]
    assert numbers == sorted(numbers), "ascending"
    assert len(numbers) == 30 == len(set(numbers))
    assert {partition_of(n) for n in numbers} == set(range(PARTITIONS))


@pytest.mark.broker(queues=[QUEUE])
def test_schedule_cancel_defer_dead_letter_and_renew_find_their_partitions(client):
    with client.get_queue_sender("pq") as sender:
        for index in range(8):
            sender.send_messages(ServiceBusMessage(f"d{index}"), timeout=OPERATION_TIMEOUT_S)
        later = now_utc() + timedelta(hours=1)
        first = sender.schedule_messages(ServiceBusMessage("s1", partition_key="x"), later)
        second = sender.schedule_messages(ServiceBusMessage("s2", partition_key="yy"), later)
        sender.cancel_scheduled_messages(first + second, timeout=OPERATION_TIMEOUT_S)
    with client.get_queue_receiver("pq", prefetch_count=8) as receiver:
        got = receive_exactly(receiver, 8)
        assert len({partition_of(m.sequence_number) for m in got}) > 1
        for message in got:
            before = message.locked_until_utc
            assert receiver.renew_message_lock(message, timeout=OPERATION_TIMEOUT_S) >= before
        deferred = [m.sequence_number for m in got[:4]]
        for message in got[:4]:
            receiver.defer_message(message)
        for message in got[4:6]:
            receiver.dead_letter_message(message, reason="bad", error_description="why")
        for message in got[6:]:
            receiver.abandon_message(message)
        taken = receiver.receive_deferred_messages(deferred, timeout=OPERATION_TIMEOUT_S)
        assert sorted(m.sequence_number for m in taken) == sorted(deferred)
        for message in taken:
            receiver.complete_message(message)
        back = receive_exactly(receiver, 2)
        assert sorted(body_of(m) for m in back) == sorted(body_of(m) for m in got[6:])
        assert all(m.delivery_count == 1 for m in back)
        for message in back:
            receiver.complete_message(message)
        assert receiver.peek_messages(max_message_count=10) == [], "nothing left, no schedule"
    with client.get_queue_receiver("pq", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver:
        dead = receive_exactly(receiver, 2)
        assert {m.dead_letter_reason for m in dead} == {"bad"}
        for message in dead:
            receiver.complete_message(message)


@pytest.mark.broker(queues=[SESSIONS])
def test_next_available_session_receivers_find_sessions_in_every_partition(client):
    sessions = [f"session-{i}" for i in range(8)]
    send_each(
        client,
        "psq",
        [[ServiceBusMessage(f"{s}/{i}", session_id=s) for i in range(3)] for s in sessions],
    )
    found = {}
    while len(found) < len(sessions):
        with client.get_queue_receiver(
            "psq", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=RECEIVE_WAIT_S
        ) as receiver:
            session = receiver.session
            session.set_state(b"seen", timeout=OPERATION_TIMEOUT_S)
            assert session.get_state(timeout=OPERATION_TIMEOUT_S) == b"seen"
            messages = receive_exactly(receiver, 3)
            found[session.session_id] = [body_of(m) for m in messages]
            partitions = {partition_of(m.sequence_number) for m in messages}
            assert len(partitions) == 1
            for message in messages:
                receiver.complete_message(message)
    assert found == {s: [f"{s}/{i}" for i in range(3)] for s in sessions}


@pytest.mark.broker(topics=[TOPIC])
def test_a_partitioned_topic_filters_into_subscriptions_in_every_partition(client):
    with client.get_topic_sender("pt") as sender:
        for index in range(16):
            colour = "red" if index % 2 else "blue"
            message = ServiceBusMessage(f"t{index}", application_properties={"colour": colour})
            sender.send_messages(message, timeout=OPERATION_TIMEOUT_S)
    with client.get_subscription_receiver("pt", "all") as receiver:
        everything = drain(receiver, 16)
    with client.get_subscription_receiver("pt", "red") as receiver:
        red = drain(receiver, 8)
    assert sorted(red.values()) == sorted(f"t{i}" for i in range(1, 16, 2))
    assert {partition_of(n) for n in everything} == set(range(PARTITIONS))
    with client.get_subscription_receiver("pt", "red") as receiver:
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


@pytest.mark.broker(durability="sync", queues=[QUEUE])
def test_kill_9_loses_nothing_acknowledged_in_any_partition(broker, client):
    # Four senders at once, so that every partition is written while the broker dies.
    def sender(tag):
        with open_client(broker) as own:
            send_each(own, "pq", [ServiceBusMessage(f"{tag}-{index}") for index in range(50)])

    threads = [threading.Thread(target=sender, args=(tag,)) for tag in "abcd"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with client.get_queue_receiver("pq") as receiver:
        before = {m.sequence_number for m in receiver.peek_messages(max_message_count=250)}
    assert len(before) == 200
    crash(broker, client)
    broker.start()
    with open_client(broker) as client:
        with client.get_queue_receiver("pq", prefetch_count=50) as receiver:
            received = drain(receiver, 200)
        assert set(received) == before, "every acknowledged message, under its number"
        assert sorted(received.values()) == sorted(f"{t}-{i}" for t in "abcd" for i in range(50))
        send_each(client, "pq", [ServiceBusMessage(f"after-{index}") for index in range(8)])
        with client.get_queue_receiver("pq") as receiver:
            after = drain(receiver, 8)
    highest = defaultdict(int)
    for sequence_number in before:
        partition = partition_of(sequence_number)
        highest[partition] = max(highest[partition], number_in_partition(sequence_number))
    for sequence_number in after:
        partition = partition_of(sequence_number)
        assert number_in_partition(sequence_number) > highest[partition], "never reused"


DETECTING = {**QUEUE, "requires_duplicate_detection": True}


@pytest.mark.broker(queues=[DETECTING])
def test_duplicate_detection_finds_an_id_in_the_partition_it_picks(client):
    # With duplicate detection the message id picks the partition, so a repeat meets the first
    # (five ids: sent in turn, a repeat would land in another partition than its first copy).
    ids = [f"order-{i}" for i in range(5)]
    repeats = [ServiceBusMessage(ident, message_id=ident) for _ in range(3) for ident in ids]
    send_each(client, "pq", repeats)
    with client.get_queue_receiver("pq") as receiver:
        received = drain(receiver, 5)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
    assert sorted(received.values()) == sorted(ids)
    assert len({partition_of(n) for n in received}) > 1


@pytest.mark.broker(queues=[QUEUE, {"name": "inbox", "forward_to": "pq"}])
def test_messages_forwarded_to_a_partitioned_queue_spread_over_its_partitions(client):
    send_each(client, "inbox", [ServiceBusMessage(f"f{index}") for index in range(12)])
    with client.get_queue_receiver("pq") as receiver:
        received = drain(receiver, 12)
    assert sorted(received.values()) == sorted(f"f{index}" for index in range(12))
    assert len({partition_of(n) for n in received}) > 1


@pytest.mark.broker(queues=[QUEUE])
def test_a_received_message_sent_back_keeps_its_partition_key(client):
    # The SDK reads the annotation back as bytes and sends those as binary: the broker takes
    # a binary partition key as its text, as Service Bus does (the SDK's own session tests
    # send received messages back).
    send_each(client, "pq", [ServiceBusMessage("keyed", partition_key="orders")])
    with client.get_queue_receiver("pq") as receiver:
        (received,) = receive_exactly(receiver, 1)
        receiver.complete_message(received)
    send_each(client, "pq", [received])
    with client.get_queue_receiver("pq") as receiver:
        (again,) = receive_exactly(receiver, 1)
        assert body_of(again) == "keyed"
        assert partition_of(again.sequence_number) == partition_of(received.sequence_number)
        receiver.complete_message(again)
