"""`[testing]`: the reset between tests and the controlled clock, through the official
azure-servicebus SDK (its `ServiceBusClient` and `ServiceBusAdministrationClient`), `tidebus
reset` and the administration endpoint's `/$testing/` calls.

A reset brings the namespace back to what the config declares: messages of every kind, session
states, duplicate-detection ids and entities created at run time gone, declared entities empty
and numbering from 1 again.

The controlled clock (`[testing] clock = "controlled"`) is the machine's plus an offset a test
moves forward with `POST /$testing/clock/advance` (or to a time with `POST /$testing/clock`).
A move answers once what is due at the new time has happened, so each time rule here fires on
an advance with no real wait: a day's schedule, a day's time to live, a 5-minute peek-lock and
session lock, 10 minutes' auto-delete on idle and duplicate-detection window. The wait after a
move is for a delivery, never for time. The clock never goes back, a durable broker keeps it
across a restart, and times are read off the broker (`GET /$testing/clock`), which may be ahead
of the test's.

Both features are off by default, Manage-only, and refused on a broker that looks exposed
unless allowed.
"""

import base64
import hashlib
import hmac
import json
import subprocess
import time
import urllib.parse
from xml.etree import ElementTree
from datetime import datetime, timedelta, timezone

import pytest
import requests
from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import MessageLockLostError, SessionLockLostError

from sb_common import (
    ENTITY_NOT_FOUND,
    OPERATION_TIMEOUT_S,
    RECEIVE_WAIT_S,
    assert_only_marker_left,
    body_of,
    ids,
    is_missing_entity,
    now_utc,
    numbered,
    open_client,
    receive_exactly,
    receive_one,
    send,
)
from test_admin import admin, secured_broker
from tidebus_broker import EMULATOR_POLICY, Broker, BrokerError, broker_binary

KEY = EMULATOR_POLICY["key"]
QUEUES = [
    {"name": "orders", "requires_duplicate_detection": True},
    {"name": "carts", "requires_session": True},
]
TOPICS = [{"name": "events", "subscriptions": ["all"]}]
NO_MANAGE = {"name": "no-manage", "key": "no-manage-key-0123456789", "rights": ["Send", "Listen"]}
# `[testing]` of a broker whose clock the test moves.
CLOCK = {"clock": "controlled"}
# The dead-letter reason of an expired message (as test_time.py).
TTL_EXPIRED = "TTLExpiredException"
# How far an unmoved clock may read ahead of the machine's, or a moved one short of its move:
# `aheadMs` is the difference of two looks at the time.
UNMOVED_MS = 1000


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


def clock_call(broker, method, path="", move=None, policy=None):
    """`method` on `/$testing/clock<path>` of `broker`'s administration endpoint with the JSON
    body `move`; signed with `policy`'s key if given, else anonymous. The `requests` answer."""
    root = f"http://127.0.0.1:{broker.admin_port}/"
    headers = {}
    if policy is not None:
        headers["Authorization"] = sas_token(root, policy["name"], policy["key"])
    return requests.request(
        method, f"{root}$testing/clock{path}", json=move, headers=headers, timeout=60
    )


def broker_clock(broker, policy=None):
    """`GET /$testing/clock`: `now`, `nowMs` and `aheadMs`."""
    answer = clock_call(broker, "GET", policy=policy)
    assert answer.status_code == 200, answer.text
    return answer.json()


def broker_now(broker, policy=None):
    """The broker's time as a datetime (it may be ahead of the test's)."""
    return at_ms(broker_clock(broker, policy)["nowMs"])


def advance(broker, by, policy=None):
    """`POST /$testing/clock/advance` `{"by": by}`: once it answers, what is due has happened.
    Returns the clock after the move."""
    answer = clock_call(broker, "POST", "/advance", {"by": by}, policy)
    assert answer.status_code == 200, answer.text
    return answer.json()


def detail(answer):
    """The `Detail` of the administration endpoint's XML error answer."""
    return ElementTree.fromstring(answer.text).findtext("Detail")


def at_ms(ms_since_epoch):
    return datetime.fromtimestamp(ms_since_epoch / 1000, timezone.utc)


def rfc3339(instant):
    """A UTC datetime as `POST /$testing/clock` takes it: `2030-01-01T00:00:00.250Z`."""
    return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ms(instant):
    """An instant as AMQP timestamps carry it: whole milliseconds since the epoch."""
    return round(instant.timestamp() * 1000)


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


@pytest.mark.parametrize("feature", [{"reset": True}, CLOCK], ids=["reset", "clock"])
def test_testing_features_are_refused_where_the_broker_looks_exposed(tmp_path, feature):
    broker = Broker(tmp_path, {"testing": feature}, queues=["orders"])
    # The harness overrides `listen` on the command line: the exposure is the WebSocket
    # listener's, which it leaves.
    broker.settings["websocket_listen"] = ["0.0.0.0:0"]
    with pytest.raises(BrokerError):
        broker.start()
    log = broker.read_log()
    (name,) = feature
    assert f"the testing feature {name} is refused" in log, log
    assert "set [testing] allow_exposed = true" in log, log


# --- the controlled clock ------------------------------------------------------------------------


@pytest.mark.broker(testing=CLOCK, queues=["q1"])
def test_a_message_scheduled_a_day_ahead_arrives_when_the_clock_is_advanced_a_day(broker, client):
    due = broker_now(broker) + timedelta(hours=24)
    # A prefetching receiver holds credit from its first receive: it waits on the queue.
    with client.get_queue_sender("q1") as sender, client.get_queue_receiver(
        "q1", prefetch_count=10
    ) as receiver:
        sender.schedule_messages(numbered("tomorrow", 0), due, timeout=OPERATION_TIMEOUT_S)
        early = receiver.receive_messages(max_wait_time=1)
        assert early == [], f"delivered before its due time: {ids(early)}"

        moved = advance(broker, "24h")
        # Due now, and already dispatched to the waiting receiver: one receive gets it.
        received = receiver.receive_messages(max_wait_time=RECEIVE_WAIT_S)
        assert ids(received) == ["tomorrow-0"], "not delivered right after the advance"
        (message,) = received
        # Activated (enqueued) at the broker's new time, a day ahead of the machine's.
        assert ms(due) <= ms(message.enqueued_time_utc) <= moved["nowMs"], (
            f"enqueued at {message.enqueued_time_utc}, due {due}, broker now {moved['now']}"
        )
        assert message.enqueued_time_utc > now_utc() + timedelta(hours=23)
        receiver.complete_message(message)


@pytest.mark.broker(
    testing=CLOCK, queues=[{"name": "q1", "dead_lettering_on_message_expiration": True}]
)
def test_a_message_with_a_day_to_live_is_dead_lettered_when_the_clock_passes_it(broker, client):
    send(client, "q1", numbered("ttl", 0, time_to_live=timedelta(days=1)))
    with client.get_queue_receiver("q1") as receiver:
        assert ids(receiver.peek_messages(10, sequence_number=1)) == ["ttl-0"]

    advance(broker, "24h 1s")
    # Peeks, so nothing but the advance could have moved it.
    with client.get_queue_receiver("q1") as receiver:
        left = receiver.peek_messages(10, sequence_number=1, timeout=OPERATION_TIMEOUT_S)
        assert left == [], f"q1 still shows {ids(left)}"
    with client.get_queue_receiver("q1", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        dead = dlq.peek_messages(10, sequence_number=1, timeout=OPERATION_TIMEOUT_S)
    assert ids(dead) == ["ttl-0"]
    assert dead[0].dead_letter_reason == TTL_EXPIRED, (
        f"dead_letter_reason {dead[0].dead_letter_reason!r}, description "
        f"{dead[0].dead_letter_error_description!r}"
    )


@pytest.mark.broker(testing=CLOCK, queues=[{"name": "q1", "lock_duration": "5m"}])
def test_a_five_minute_peek_lock_is_lost_when_the_clock_is_advanced_five_minutes(
    broker, client
):
    send(client, "q1", numbered("locked", 0))
    with client.get_queue_receiver("q1") as receiver:
        message = receive_one(receiver)
        assert message.delivery_count == 0
        assert message.locked_until_utc > now_utc() + timedelta(minutes=4)
        advance(broker, "5m")
        # The lock ends at the broker's time; the SDK, judging by the machine's, still thinks
        # it held and asks the broker, which says it is lost.
        with pytest.raises(MessageLockLostError):
            receiver.complete_message(message)

    with client.get_queue_receiver("q1") as receiver:
        again = receive_one(receiver)
        assert again.sequence_number == message.sequence_number
        # The AMQP header's count of earlier deliveries (Service Bus's DeliveryCount is 2).
        assert again.delivery_count == 1, f"delivery_count {again.delivery_count} after a lost lock"
        receiver.complete_message(again)


@pytest.mark.broker(
    testing=CLOCK, queues=[{"name": "sq", "requires_session": True, "lock_duration": "5m"}]
)
def test_a_session_lock_is_lost_when_the_clock_passes_it(broker, client):
    send(client, "sq", ServiceBusMessage("in s", message_id="s-0", session_id="s"))
    with client.get_queue_receiver("sq", session_id="s") as receiver:
        (message,) = receive_exactly(receiver, 1)
        receiver.session.get_state(timeout=OPERATION_TIMEOUT_S)  # the lock held so far
        advance(broker, "5m 1s")
        with pytest.raises(SessionLockLostError):
            receiver.session.renew_lock(timeout=OPERATION_TIMEOUT_S)

    # The lapsed session is free again, its message counted once more.
    with client.get_queue_receiver("sq", session_id="s") as again:
        (back,) = receive_exactly(again, 1)
        assert (back.message_id, back.delivery_count) == ("s-0", 1)
        again.complete_message(back)


@pytest.mark.broker(
    testing=CLOCK, queues=["q1", {"name": "idle", "auto_delete_on_idle": "10m"}]
)
def test_a_queue_idle_for_ten_minutes_is_deleted_when_the_clock_is_advanced_ten_minutes(
    broker, client
):
    # Attaching is not activity: this only shows the queue is there before the advance.
    with client.get_queue_sender("idle"):
        pass
    advance(broker, "10m")
    with pytest.raises(ENTITY_NOT_FOUND) as caught:
        with client.get_queue_sender("idle"):
            pass
    assert is_missing_entity(caught.value, "idle"), repr(caught.value.inner_exception)
    send(client, "q1", numbered("other", 0))  # a queue without auto-delete stays


@pytest.mark.broker(
    testing=CLOCK,
    queues=[
        {
            "name": "dedup",
            "requires_duplicate_detection": True,
            "duplicate_detection_history_time_window": "10m",
        }
    ],
)
def test_a_duplicate_is_taken_again_once_the_clock_passes_its_detection_window(broker, client):
    with client.get_queue_sender("dedup") as sender:

        def send_x(body):
            message = ServiceBusMessage(body, message_id="X")
            sender.send_messages(message, timeout=OPERATION_TIMEOUT_S)

        send_x("first")
        send_x("repeat")  # dropped
        advance(broker, "11m")
        # The window follows the broker's clock: X was first sent 11 minutes ago.
        send_x("after")
    with client.get_queue_receiver("dedup") as receiver:
        received = receive_exactly(receiver, 2)
        assert [body_of(m) for m in received] == ["first", "after"]
        for message in received:
            receiver.complete_message(message)
    assert_only_marker_left(client, "dedup")


def test_the_clock_is_off_by_default_and_moved_only_with_manage(tmp_path):
    off = Broker(tmp_path / "off", queues=["q1"]).start()
    try:
        answer = clock_call(off, "GET")
        assert answer.status_code == 404, answer.text
        assert '[testing] clock = "controlled"' in detail(answer), answer.text
        answer = clock_call(off, "POST", "/advance", {"by": "1h"})
        assert answer.status_code == 404, answer.text
    finally:
        off.stop()
    on = Broker(
        tmp_path / "on",
        {"allow_anonymous": False, "testing": CLOCK},
        queues=["q1"],
        policies=[EMULATOR_POLICY, NO_MANAGE],
    ).start()
    try:
        refused = clock_call(on, "POST", "/advance", {"by": "24h"}, NO_MANAGE)
        assert refused.status_code == 401, refused.text
        assert "'Manage' claim(s) are required" in detail(refused), refused.text
        assert clock_call(on, "POST", "/advance", {"by": "24h"}).status_code == 401
        assert clock_call(on, "GET", policy=NO_MANAGE).status_code == 401
        assert broker_clock(on, EMULATOR_POLICY)["aheadMs"] < UNMOVED_MS, "the clock moved"
        # The Manage key moves it.
        assert advance(on, "1h", EMULATOR_POLICY)["aheadMs"] > 3_600_000 - UNMOVED_MS
    finally:
        on.stop()


@pytest.mark.broker(testing=CLOCK, queues=["q1"])
def test_the_clock_never_goes_back(broker):
    ahead = advance(broker, "1h")
    # Still ahead of the machine's time, but behind the broker's.
    back = at_ms(ahead["nowMs"]) - timedelta(minutes=30)
    answer = clock_call(broker, "POST", move={"to": rfc3339(back)})
    assert answer.status_code == 409, answer.text
    assert "a controlled clock never goes back" in detail(answer), answer.text
    assert broker_clock(broker)["nowMs"] >= ahead["nowMs"], "the clock went back"

    # Forward to a time is taken, to the millisecond.
    to = at_ms(ahead["nowMs"]) + timedelta(days=1)
    answer = clock_call(broker, "POST", move={"to": rfc3339(to)})
    assert answer.status_code == 200, answer.text
    assert ms(to) <= answer.json()["nowMs"] < ms(to) + 60_000, answer.text


@pytest.mark.broker(testing=CLOCK, durability="sync", queues=["q1"])
def test_a_restarted_durable_broker_keeps_its_clock_and_its_schedule(broker):
    due = broker_now(broker) + timedelta(days=2)
    with open_client(broker) as client, client.get_queue_sender("q1") as sender:
        sender.schedule_messages(numbered("later", 0), due, timeout=OPERATION_TIMEOUT_S)
    moved = advance(broker, "1d")

    broker.stop()
    broker.start()
    assert broker_clock(broker)["nowMs"] >= moved["nowMs"], "the restart took the clock back"

    with open_client(broker) as client:
        with client.get_queue_receiver("q1", prefetch_count=10) as receiver:
            early = receiver.receive_messages(max_wait_time=1)
            assert early == [], f"delivered before its due time: {ids(early)}"
            advance(broker, "1d")
            received = receiver.receive_messages(max_wait_time=RECEIVE_WAIT_S)
            assert ids(received) == ["later-0"], "not delivered right after the advance"
            assert ms(received[0].enqueued_time_utc) >= ms(due)
            receiver.complete_message(received[0])
