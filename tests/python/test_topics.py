"""Topics and subscriptions against the official Azure Service Bus SDK for Python, unmodified.

A send to a topic gets one sequence number and enqueued time; every subscription whose rules
match gets a copy carrying them, shaped by the matching rules' actions (design.md D7). Copies
are independent: settling, dead-lettering or expiring one never touches another. Scheduled
messages are held by the topic and fan out when due. A copy's time to live is the shortest of
the message's, the topic's and the subscription's.
"""

from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue

from sb_common import (
    ENTITY_NOT_FOUND,
    OPERATION_TIMEOUT_S,
    expected_summary,
    ids,
    is_missing_entity,
    now_utc,
    numbered,
    properties_of,
    receive_exactly,
    receive_one,
    summary,
    wait_until_not_found,
    wait_until_past,
)

TWO_SUBSCRIPTIONS = [{"name": "t1", "subscriptions": ["s1", "s2"]}]

ORDERS = [
    {
        "name": "orders",
        "subscriptions": [
            {
                "name": "eu",
                "rules": [
                    {
                        "name": "eu-only",
                        "sql": "region = 'eu' AND sys.Label LIKE 'order-%'",
                        "action": "SET priority = 'high'; REMOVE internal; SET sys.To = 'eu-desk'",
                    }
                ],
            },
            {
                "name": "vip",
                "rules": [
                    {"name": "vip", "correlation": {"subject": "vip", "properties": {"tier": "gold"}}}
                ],
            },
            "all",
        ],
    }
]


def publish(client, topic, messages):
    with client.get_topic_sender(topic) as sender:
        sender.send_messages(messages, timeout=OPERATION_TIMEOUT_S)


def peek_all(client, topic, subscription, **options):
    with client.get_subscription_receiver(topic, subscription, **options) as receiver:
        return receiver.peek_messages(max_message_count=100, timeout=OPERATION_TIMEOUT_S)


@pytest.mark.broker(topics=TWO_SUBSCRIPTIONS)
def test_every_subscription_gets_a_copy_with_the_topics_number_and_time(client):
    publish(client, "t1", [numbered("fan", i) for i in range(3)])

    got = {}
    for name in ("s1", "s2"):
        with client.get_subscription_receiver("t1", name) as receiver:
            messages = receive_exactly(receiver, 3)
            got[name] = [(summary(m), m.sequence_number, m.enqueued_time_utc) for m in messages]
            for message in messages:
                receiver.complete_message(message)

    assert got["s1"] == got["s2"], "copies carry the topic's number and enqueued time"
    assert [s for s, _, _ in got["s1"]] == [expected_summary("fan", i) for i in range(3)]
    numbers = [n for _, n, _ in got["s1"]]
    assert numbers == list(range(numbers[0], numbers[0] + 3)), f"numbers {numbers}"
    assert peek_all(client, "t1", "s1") == [] and peek_all(client, "t1", "s2") == []


@pytest.mark.broker(topics=TWO_SUBSCRIPTIONS)
def test_settling_in_one_subscription_leaves_the_other(client):
    publish(client, "t1", numbered("own", 0))

    with client.get_subscription_receiver("t1", "s1") as receiver:
        first = receive_one(receiver)
        receiver.dead_letter_message(first, reason="r1", error_description="d1")
    with client.get_subscription_receiver("t1", "s2") as receiver:
        copy = receive_one(receiver)
        receiver.abandon_message(copy)
        again = receive_one(receiver)
        assert (again.message_id, again.delivery_count) == ("own-0", 1)
        receiver.complete_message(again)

    dead_letters = {"sub_queue": ServiceBusSubQueue.DEAD_LETTER}
    with client.get_subscription_receiver("t1", "s1", **dead_letters) as dlq:
        dead = receive_one(dlq)
        assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("r1", "d1")
        assert dead.sequence_number == first.sequence_number
        dlq.complete_message(dead)
    assert peek_all(client, "t1", "s2", **dead_letters) == [], "s2 dead-lettered nothing"
    assert peek_all(client, "t1", "s1") == [] and peek_all(client, "t1", "s2") == []


@pytest.mark.broker(topics=TWO_SUBSCRIPTIONS)
def test_receive_and_delete_takes_only_that_subscriptions_copy(client):
    publish(client, "t1", numbered("rad", 0))

    mode = {"receive_mode": ServiceBusReceiveMode.RECEIVE_AND_DELETE}
    with client.get_subscription_receiver("t1", "s1", **mode) as receiver:
        assert summary(receive_one(receiver)) == expected_summary("rad", 0)

    assert peek_all(client, "t1", "s1") == []
    assert ids(peek_all(client, "t1", "s2")) == ["rad-0"]


@pytest.mark.broker(topics=ORDERS)
def test_rules_pick_the_subscriptions_and_actions_shape_the_copies(client):
    def order(index, subject, **properties):
        return ServiceBusMessage(
            f"m body {index}",
            message_id=f"m-{index}",
            subject=subject,
            application_properties=properties,
        )

    messages = [
        order(0, "order-1", region="eu", internal="x"),
        order(1, "order-2", region="us"),
        order(2, "vip", tier="gold"),
        order(3, "other", region="eu"),
        order(4, "vip", tier="silver"),
    ]
    publish(client, "orders", messages)

    assert ids(peek_all(client, "orders", "eu")) == ["m-0"]
    assert ids(peek_all(client, "orders", "vip")) == ["m-2"]
    assert ids(peek_all(client, "orders", "all")) == [f"m-{i}" for i in range(5)]

    (eu,) = peek_all(client, "orders", "eu")
    assert properties_of(eu) == {"region": "eu", "priority": "high", "RuleName": "eu-only"}
    assert eu.to == "eu-desk", "the action sets a system property too"
    (plain,) = [m for m in peek_all(client, "orders", "all") if m.message_id == "m-0"]
    assert properties_of(plain) == {"region": "eu", "internal": "x"}, "other copies unchanged"
    assert plain.to is None


@pytest.mark.broker(topics=TWO_SUBSCRIPTIONS)
def test_a_scheduled_message_is_held_by_the_topic_and_fans_out_when_due(client):
    due = now_utc() + timedelta(seconds=2)
    with client.get_topic_sender("t1") as sender:
        (kept,) = sender.schedule_messages(numbered("sched", 0), due, timeout=OPERATION_TIMEOUT_S)
        (cancelled,) = sender.schedule_messages(numbered("sched", 1), due, timeout=OPERATION_TIMEOUT_S)
        sender.cancel_scheduled_messages(cancelled, timeout=OPERATION_TIMEOUT_S)
    assert peek_all(client, "t1", "s1") == [], "subscriptions hold nothing before it is due"

    for name in ("s1", "s2"):
        with client.get_subscription_receiver("t1", name) as receiver:
            message = receive_one(receiver)
            assert message.message_id == "sched-0"
            assert message.sequence_number > max(kept, cancelled), "renumbered at activation"
            assert message.enqueued_time_utc >= due - timedelta(seconds=1)
            receiver.complete_message(message)
    assert peek_all(client, "t1", "s1") == [] and peek_all(client, "t1", "s2") == []


@pytest.mark.broker(
    topics=[
        {
            "name": "t1",
            "default_message_time_to_live": "1h",
            "subscriptions": [
                {
                    "name": "short",
                    "default_message_time_to_live": "2s",
                    "dead_lettering_on_message_expiration": True,
                },
                {"name": "long", "default_message_time_to_live": "2h"},
            ],
        }
    ]
)
def test_the_shortest_of_message_topic_and_subscription_ttl_wins(client):
    publish(client, "t1", numbered("ttl", 0, time_to_live=timedelta(hours=3)))

    (long,) = peek_all(client, "t1", "long")
    assert long.expires_at_utc - long.enqueued_time_utc == timedelta(hours=1), "the topic's"
    (short,) = peek_all(client, "t1", "short")
    assert short.expires_at_utc - short.enqueued_time_utc == timedelta(seconds=2), "the sub's"

    wait_until_past(short.expires_at_utc)
    dead_letters = {"sub_queue": ServiceBusSubQueue.DEAD_LETTER}
    with client.get_subscription_receiver("t1", "short", **dead_letters) as dlq:
        dead = receive_one(dlq)
        assert (dead.message_id, dead.dead_letter_reason) == ("ttl-0", "TTLExpiredException")
        dlq.complete_message(dead)
    assert ids(peek_all(client, "t1", "long")) == ["ttl-0"], "the other copy lives on"


@pytest.mark.broker(topics=TWO_SUBSCRIPTIONS)
def test_unknown_subscription_raises_entity_not_found(client):
    with pytest.raises(ENTITY_NOT_FOUND) as caught:
        with client.get_subscription_receiver("t1", "no-such-subscription") as receiver:
            receiver.receive_messages(max_wait_time=1)
    assert is_missing_entity(caught.value), repr(caught.value.inner_exception)


@pytest.mark.broker(
    topics=[
        {
            "name": "t1",
            "subscriptions": [
                {"name": "strict", "rules": [{"name": "big", "sql": "amount + 1 > 10"}]},
                {
                    "name": "lenient",
                    "dead_lettering_on_filter_evaluation_exceptions": False,
                    "rules": [{"name": "big", "sql": "amount + 1 > 10"}],
                },
            ],
        }
    ]
)
def test_a_filter_that_cannot_be_evaluated_dead_letters_the_copy_or_drops_it(client):
    publish(client, "t1", [
        ServiceBusMessage("a", message_id="text", application_properties={"amount": "ten"}),
        ServiceBusMessage("b", message_id="big", application_properties={"amount": 20}),
    ])

    assert ids(peek_all(client, "t1", "strict")) == ["big"]
    assert ids(peek_all(client, "t1", "lenient")) == ["big"]
    dead_letters = {"sub_queue": ServiceBusSubQueue.DEAD_LETTER}
    (dead,) = peek_all(client, "t1", "strict", **dead_letters)
    assert (dead.message_id, dead.dead_letter_reason) == ("text", "FilterEvaluationException")
    assert "big" in dead.dead_letter_error_description, dead.dead_letter_error_description
    assert peek_all(client, "t1", "lenient", **dead_letters) == []


def wait_until_subscription_deleted(client, topic, subscription):
    """Open receivers on the subscription until one fails with entity-not-found (attaching is
    not activity); returns when it did."""

    def attach():
        with client.get_subscription_receiver(topic, subscription):
            pass

    return wait_until_not_found(attach, f"{topic}/Subscriptions/{subscription}")


@pytest.mark.broker(
    topics=[
        {
            "name": "t1",
            "subscriptions": [{"name": "brief", "auto_delete_on_idle": "2s"}, "kept"],
        }
    ]
)
def test_an_idle_subscription_is_deleted_and_its_topic_and_siblings_go_on(client):
    started = now_utc()
    publish(client, "t1", numbered("idle", 0))

    gone = wait_until_subscription_deleted(client, "t1", "brief")
    assert gone >= started + timedelta(seconds=2), f"deleted {gone - started} after start"
    with pytest.raises(ENTITY_NOT_FOUND) as caught:
        with client.get_subscription_receiver("t1", "brief", sub_queue=ServiceBusSubQueue.DEAD_LETTER):
            pass
    assert is_missing_entity(caught.value), repr(caught.value.inner_exception)
    publish(client, "t1", numbered("idle", 1))
    assert ids(peek_all(client, "t1", "kept")) == ["idle-0", "idle-1"]
