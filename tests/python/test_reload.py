"""SIGHUP reloads the config file: entities it adds are created, a queue's and a
subscription's changed settings and rules apply to the live entity with its messages and locks
untouched, and a file with an error changes nothing."""

from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue

from sb_common import RECEIVE_WAIT_S, now_utc, open_client, receive_exactly


def test_an_added_queue_is_created_and_usable(broker):
    log = broker.reload(queues=broker.queues + ["added"])
    assert "reload: created 'added'" in log, log
    with open_client(broker) as client:
        with client.get_queue_sender("added") as sender:
            sender.send_messages(ServiceBusMessage("into the new queue"))
        with client.get_queue_receiver("added", max_wait_time=RECEIVE_WAIT_S) as receiver:
            got = receive_exactly(receiver, 1)[0]
            assert str(got) == "into the new queue"
            receiver.complete_message(got)


def test_a_changed_delivery_limit_applies_to_next_deliveries_with_locks_untouched(broker):
    with open_client(broker) as client:
        with client.get_queue_sender("q1") as sender:
            sender.send_messages([ServiceBusMessage("held"), ServiceBusMessage("bounced")])
        with client.get_queue_receiver("q1", max_wait_time=RECEIVE_WAIT_S) as receiver:
            held = receive_exactly(receiver, 1)[0]
            queues = [{"name": "q1", "max_delivery_count": 2}] + broker.queues[1:]
            log = broker.reload(queues=queues)
            assert "reload: updated 'q1'" in log, log
            receiver.complete_message(held)  # a lock taken before the reload holds
            for _ in range(2):
                bounced = receive_exactly(receiver, 1)[0]
                assert str(bounced) == "bounced"
                receiver.abandon_message(bounced)
        with client.get_queue_receiver(
            "q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=RECEIVE_WAIT_S
        ) as dead:
            got = receive_exactly(dead, 1)[0]
            assert (str(got), got.dead_letter_reason) == ("bounced", "MaxDeliveryCountExceeded")
            dead.complete_message(got)


def test_a_file_with_an_error_changes_nothing_and_says_where(broker):
    text = broker.config_path.read_text() + "\n[[queues]]\nname = \"never\"\nlock_duration = \n"
    log = broker.reload(text=text)
    assert "reload refused" in log, log
    assert "tidebus.toml:" in log, "the error names the file and position"
    with open_client(broker) as client:
        with client.get_queue_sender("q1") as sender:
            sender.send_messages(ServiceBusMessage("still served"))
    log = broker.reload(queues=broker.queues)
    assert "never" not in log


def test_what_needs_a_restart_is_reported_and_a_removed_queue_left_alone(broker):
    broker.settings["max_connections"] = 7
    log = broker.reload(queues=broker.queues[1:])
    assert "broker.max_connections changed: it needs a restart" in log, log
    assert "'q1' is no longer in the file: left alone" in log, log
    with open_client(broker) as client:
        with client.get_queue_sender("q1") as sender:
            sender.send_messages(ServiceBusMessage("q1 stays"))


@pytest.mark.broker(topics=[{"name": "t1", "subscriptions": ["s1"]}])
def test_a_subscription_s_settings_and_rules_change_in_place(broker):
    topics = [
        {
            "name": "t1",
            "subscriptions": [
                {
                    "name": "s1",
                    "lock_duration": "5s",
                    "rules": [{"name": "red", "sql": "color = 'red'"}],
                }
            ],
        }
    ]
    log = broker.reload(topics=topics)
    assert "removed rule '$Default'" in log and "added rule 'red'" in log, log
    with open_client(broker) as client:
        with client.get_topic_sender("t1") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("blue", application_properties={"color": "blue"}),
                    ServiceBusMessage("red", application_properties={"color": "red"}),
                ]
            )
        with client.get_subscription_receiver("t1", "s1", max_wait_time=RECEIVE_WAIT_S) as receiver:
            got = receive_exactly(receiver, 1)[0]
            assert str(got) == "red", "the new rule picks the copies"
            assert got.locked_until_utc - now_utc() < timedelta(seconds=10), "the new lock"
            receiver.complete_message(got)
            assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
