"""`[testing]`: the reset between tests, through the official azure-servicebus SDK (its
`ServiceBusClient` and `ServiceBusAdministrationClient`) and `tidebus reset`.

A reset brings the namespace back to what the config declares: messages of every kind, session
states, duplicate-detection ids and entities created at run time gone, declared entities empty
and numbering from 1 again. It is off by default, Manage-only, and the testing features are
refused on a broker that looks exposed unless allowed.
"""

import base64
import hashlib
import hmac
import json
import subprocess
import time
import urllib.parse
from datetime import timedelta

import pytest
import requests
from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue

from sb_common import OPERATION_TIMEOUT_S, now_utc, open_client, receive_exactly
from test_admin import admin, secured_broker
from tidebus_broker import EMULATOR_POLICY, Broker, BrokerError, broker_binary

KEY = EMULATOR_POLICY["key"]
QUEUES = [
    {"name": "orders", "requires_duplicate_detection": True},
    {"name": "carts", "requires_session": True},
]
TOPICS = [{"name": "events", "subscriptions": ["all"]}]
NO_MANAGE = {"name": "no-manage", "key": "no-manage-key-0123456789", "rights": ["Send", "Listen"]}


def reset_by_command(broker, key=KEY):
    """`tidebus reset` against `broker`: its exit status, stdout and stderr."""
    done = subprocess.run(
        [broker_binary(), "reset", "--admin", f"127.0.0.1:{broker.admin_port}", "--key", key],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


def sas_token(resource, key_name, key, lifetime_s=300):
    """A shared access signature, as the SDKs sign one."""
    expiry = int(time.time()) + lifetime_s
    encoded = urllib.parse.quote_plus(resource)
    signature = hmac.new(key.encode(), f"{encoded}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = urllib.parse.quote_plus(base64.b64encode(signature).decode())
    return f"SharedAccessSignature sr={encoded}&sig={signature}&se={expiry}&skn={key_name}"


def test_a_reset_leaves_nothing_behind_and_numbers_from_one(tmp_path):
    broker = Broker(
        tmp_path,
        {"durability": "sync", "testing": {"reset": True}},
        queues=QUEUES,
        topics=TOPICS,
    ).start()
    try:
        with open_client(broker) as client:
            with client.get_queue_sender("orders") as sender:
                sender.send_messages(
                    [ServiceBusMessage(f"m{i}", message_id=f"m{i}") for i in range(4)],
                    timeout=OPERATION_TIMEOUT_S,
                )
                sender.schedule_messages(
                    ServiceBusMessage("tomorrow"), now_utc() + timedelta(days=1)
                )
            with client.get_queue_receiver("orders") as receiver:
                dead, deferred = receive_exactly(receiver, 2)
                receiver.dead_letter_message(dead, reason="test")
                receiver.defer_message(deferred)
            with client.get_queue_sender("carts") as sender:
                sender.send_messages(ServiceBusMessage("item", session_id="cart-1"))
            with client.get_queue_receiver("carts", session_id="cart-1") as receiver:
                receiver.session.set_state("checkout")
            with client.get_topic_sender("events") as sender:
                sender.send_messages(ServiceBusMessage("event"))

        status, out, err = reset_by_command(broker)
        assert status == 0, err
        assert json.loads(out)["entities"] == 3

        with open_client(broker) as client:
            for sub_queue in (None, ServiceBusSubQueue.DEAD_LETTER):
                with client.get_queue_receiver("orders", sub_queue=sub_queue) as receiver:
                    assert receiver.peek_messages(10, sequence_number=0) == [], sub_queue
            with client.get_subscription_receiver("events", "all") as receiver:
                assert receiver.peek_messages(10, sequence_number=0) == []
            with client.get_queue_receiver("carts", session_id="cart-1") as receiver:
                assert receiver.session.get_state() is None
                assert receiver.peek_messages(10, sequence_number=0) == []
            # The duplicate-detection window is empty: m0 is taken again, numbered 1.
            with client.get_queue_sender("orders") as sender:
                sender.send_messages(ServiceBusMessage("m0", message_id="m0"))
            with client.get_queue_receiver("orders") as receiver:
                (again,) = receive_exactly(receiver, 1)
                assert (str(again), again.sequence_number) == ("m0", 1)
                receiver.complete_message(again)
        # Durable: a restart finds the namespace as the reset left it.
        broker.stop()
        broker.start()
        with open_client(broker) as client:
            with client.get_queue_receiver("orders") as receiver:
                assert receiver.peek_messages(10, sequence_number=0) == []
    finally:
        broker.stop()


def test_a_reset_deletes_what_was_created_at_run_time(tmp_path):
    broker = secured_broker(
        tmp_path, testing={"reset": True, "allow_exposed": True}
    )
    try:
        with admin(broker) as client:
            client.create_queue("runtime")
            client.create_subscription("events", "extra")
        answer = requests.post(
            f"https://localhost:{broker.admin_port}/$testing/reset",
            headers={
                "Authorization": sas_token(
                    f"https://localhost:{broker.admin_port}/", EMULATOR_POLICY["name"], KEY
                )
            },
            verify=broker.ca,
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["entities"] == 2
        with admin(broker) as client:
            with pytest.raises(ResourceNotFoundError):
                client.get_queue("runtime")
            with pytest.raises(ResourceNotFoundError):
                client.get_subscription("events", "extra")
            assert client.get_queue("declared").name == "declared"
            assert [s.name for s in client.list_subscriptions("events")] == ["all", "picky"]
    finally:
        broker.stop()


def test_a_reset_is_off_by_default_and_needs_manage(tmp_path):
    off = Broker(tmp_path / "off", queues=["orders"]).start()
    try:
        status, _, err = reset_by_command(off)
        assert status == 1
        assert "404" in err and "[testing] reset = true" in err, err
    finally:
        off.stop()
    on = Broker(
        tmp_path / "on",
        {"allow_anonymous": False, "testing": {"reset": True}},
        queues=["orders"],
        policies=[EMULATOR_POLICY, NO_MANAGE],
    ).start()
    try:
        answer = requests.post(
            f"http://127.0.0.1:{on.admin_port}/$testing/reset",
            headers={
                "Authorization": sas_token(
                    f"http://127.0.0.1:{on.admin_port}/", NO_MANAGE["name"], NO_MANAGE["key"]
                )
            },
            timeout=60,
        )
        assert answer.status_code == 401, answer.text
        assert "Manage&apos; claim(s) are required" in answer.text
        status, _, err = reset_by_command(on, key="not-the-key")
        assert status == 1 and "401" in err, err
    finally:
        on.stop()


def test_testing_features_are_refused_where_the_broker_looks_exposed(tmp_path):
    broker = Broker(
        tmp_path,
        {"testing": {"reset": True}},
        queues=["orders"],
    )
    # The harness overrides `listen` on the command line: the exposure is the WebSocket
    # listener's, which it leaves.
    broker.settings["websocket_listen"] = ["0.0.0.0:0"]
    with pytest.raises(BrokerError):
        broker.start()
    log = broker.read_log()
    assert "the testing feature reset is refused" in log, log
    assert "set [testing] allow_exposed = true" in log, log
