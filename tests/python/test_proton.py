"""The broker against python-qpid-proton, a client nobody here wrote.

Each test runs its own broker (see conftest.py) and pins one behaviour a proton user relies on.
"""

import struct
import time
import uuid

import pytest
from proton import SASL, Data, Delivery, Message, Terminus, Timeout, symbol, timestamp
from proton.handlers import MessagingHandler, TransactionHandler
from azure.servicebus import ServiceBusMessage, ServiceBusMessageState, ServiceBusSubQueue
from proton.reactor import Container, Copy, LinkOption, Selector
from proton.utils import LinkDetached, SendException

import amqp_raw
from proton_client import (
    DEADLINE_S,
    assert_round_trip,
    barrier,
    connect,
    pump,
    send_accepted,
    settle_modified,
)

RAW_DEADLINE_S = 15.0


def numbered(tag, index):
    return Message(
        id=f"{tag}-{index}",
        body=f"{tag} body {index}",
        properties={"index": index, "tag": tag},
    )


def test_default_link_names_send_and_receive_in_order(broker):
    sent = [numbered("order", i) for i in range(3)]
    with connect(broker) as conn:
        sender = conn.create_sender("q1")
        receiver = conn.create_receiver("q1")
        assert sender.name == receiver.name, "precondition: proton names both links alike"
        for message in sent:
            send_accepted(sender, message)
        received = []
        for _ in sent:
            received.append(receiver.receive(timeout=DEADLINE_S))
            receiver.accept()
    now_ms = time.time() * 1000

    assert [m.body for m in received] == [m.body for m in sent], "bodies differ or out of order"
    assert [m.id for m in received] == [m.id for m in sent]
    for want, got in zip(sent, received):
        assert dict(got.properties or {}) == want.properties, f"application properties of {want.id}"
        assert got.delivery_count == 0, f"{want.id}: first delivery has delivery-count 0"

    annotations = [dict(m.annotations or {}) for m in received]
    sequence = [a.get("x-opt-sequence-number") for a in annotations]
    for number in sequence:
        assert isinstance(number, int) and not isinstance(number, timestamp), (
            f"x-opt-sequence-number must be a long, got {number!r} in {annotations}"
        )
    assert sequence == [sequence[0], sequence[0] + 1, sequence[0] + 2], (
        f"sequence numbers are not consecutive and increasing: {sequence}"
    )
    enqueued = [a.get("x-opt-enqueued-time") for a in annotations]
    for value in enqueued:
        assert isinstance(value, timestamp), f"x-opt-enqueued-time must be a timestamp: {value!r}"
        assert abs(value - now_ms) < 5 * 60 * 1000, f"enqueued time {value} is not near {now_ms}"
    assert enqueued == sorted(enqueued), f"enqueued times go backwards: {enqueued}"


@pytest.mark.parametrize(
    "mechanism, credentials",
    [
        ("PLAIN", {"user": "RootManageSharedAccessKey", "password": "SAS_KEY_VALUE"}),
        ("ANONYMOUS", {}),
    ],
    ids=["PLAIN", "ANONYMOUS"],
)
def test_sasl_mechanism_connects_and_transfers(broker, mechanism, credentials):
    with connect(broker, allowed_mechs=mechanism, **credentials) as conn:
        sasl = conn.conn.transport.sasl()
        assert sasl.outcome == SASL.OK, f"SASL outcome {sasl.outcome}"
        assert sasl.mech == mechanism
        assert_round_trip(conn, "q1", f"over {mechanism}")


def test_accepted_message_is_deleted(broker):
    with connect(broker) as first:
        send_accepted(first.create_sender("q1"), Message(body="accepted"))
        receiver = first.create_receiver("q1")
        assert receiver.receive(timeout=DEADLINE_S).body == "accepted"
        receiver.accept()
    # Closing waited for the broker's close, so it has read the settlement.

    with connect(broker) as second:
        receiver = second.create_receiver("q1")
        with pytest.raises(Timeout):
            got = receiver.receive(timeout=1)
            pytest.fail(f"an accepted message came back: {got.body!r}")
        send_accepted(second.create_sender("q1"), Message(body="marker"))
        got = receiver.receive(timeout=DEADLINE_S)
        assert got.body == "marker", f"expected only the marker, got {got.body!r} first"


def test_a_receiver_with_distribution_mode_copy_browses_without_taking(broker):
    # `Copy()` sets the source's distribution-mode to copy, as Qpid JMS's QueueBrowser does:
    # the broker shows each message, pre-settled, and takes none.
    with connect(broker) as conn:
        sender = conn.create_sender("q1")
        for index in range(3):
            send_accepted(sender, numbered("browse", index))
        browser = conn.create_receiver("q1", options=Copy(), credit=10)
        seen = []
        for _ in range(3):
            seen.append(browser.receive(timeout=DEADLINE_S).id)
        assert not browser.fetcher.unsettled, "copies come pre-settled"
        assert seen == ["browse-0", "browse-1", "browse-2"]
        browser.close()
        receiver = conn.create_receiver("q1")
        taken = []
        for _ in range(3):
            message = receiver.receive(timeout=DEADLINE_S)
            taken.append((message.id, message.delivery_count))
            receiver.accept()
        assert taken == [("browse-0", 0), ("browse-1", 0), ("browse-2", 0)], "browsing takes nothing"


def test_a_jms_delivery_time_schedules_the_message(broker, client):
    # Qpid JMS's delivery delay: the broker offers DELAYED_DELIVERY, and a message's
    # x-opt-delivery-time (a long of ms since the epoch) is its scheduled enqueue time.
    due_ms = int(time.time() * 1000) + 3_600_000
    with connect(broker) as conn:
        assert symbol("DELAYED_DELIVERY") in (conn.conn.remote_offered_capabilities or [])
        delayed = Message(id="later", body="in an hour", annotations={
            symbol("x-opt-delivery-time"): due_ms,
        })
        send_accepted(conn.create_sender("q1"), delayed)
    with client.get_queue_receiver("q1") as receiver:
        (peeked,) = receiver.peek_messages(10, sequence_number=0)
        assert (peeked.message_id, peeked.state) == ("later", ServiceBusMessageState.SCHEDULED)
        assert peeked.raw_amqp_message.annotations[b"x-opt-delivery-time"] == due_ms
        assert receiver.receive_messages(max_wait_time=1) == [], "not before its time"


def test_released_message_is_redelivered_without_counting(broker):
    with connect(broker) as first:
        send_accepted(first.create_sender("q1"), Message(id="rel-1", body="release me"))
        receiver = first.create_receiver("q1")
        message = receiver.receive(timeout=DEADLINE_S)
        assert (message.id, message.delivery_count) == ("rel-1", 0)
        receiver.release(delivered=False)  # the `released` outcome
        barrier(first, "q1")
        # `first` stays open with no credit left, so only the released outcome frees the message.
        with connect(broker) as second:
            again = second.create_receiver("q1").receive(timeout=DEADLINE_S)
            assert (again.id, again.body) == ("rel-1", "release me")
            assert again.delivery_count == 0, "released must not count a delivery attempt"


@pytest.mark.parametrize("delivery_failed", [None, True], ids=["release-delivered", "delivery-failed"])
def test_modified_message_is_redelivered_with_count(broker, delivery_failed):
    with connect(broker) as first:
        send_accepted(first.create_sender("q1"), Message(id="mod-1", body="modify me"))
        receiver = first.create_receiver("q1")
        message = receiver.receive(timeout=DEADLINE_S)
        assert (message.id, message.delivery_count) == ("mod-1", 0)
        if delivery_failed is None:
            # proton's own call: `modified` with delivery-failed false. AMQP leaves the count to
            # the broker there; Tidebus treats any plain `modified` as abandon, which counts.
            receiver.release(delivered=True)
        else:
            settle_modified(receiver, delivery_failed=True)
        barrier(first, "q1")
        with connect(broker) as second:
            again = second.create_receiver("q1").receive(timeout=DEADLINE_S)
            assert (again.id, again.body) == ("mod-1", "modify me")
            assert again.delivery_count == 1, "modified (abandon) counts one delivery attempt"


@pytest.mark.parametrize("role", ["sender", "receiver"])
def test_unknown_address_is_refused_with_not_found(broker, role):
    with connect(broker) as conn:
        with pytest.raises(LinkDetached) as refused:
            if role == "sender":
                conn.create_sender("no-such-queue")
            else:
                conn.create_receiver("no-such-queue")
        assert refused.value.condition == "amqp:not-found", str(refused.value)
        assert_round_trip(conn, "q1", "the connection outlives a refused link")


def echoed_filter_keys(receiver):
    """The keys of the source filter the broker's attach echoed (the filters it applies)."""
    filters = receiver.link.remote_source.filter
    filters.rewind()
    if not filters.next():
        return []
    return list(filters.get_object())


def colored(body, color):
    return Message(body=body, properties={"color": color})


def test_a_receiver_with_a_selector_gets_only_matches_and_leaves_the_rest_in_order(broker):
    with connect(broker) as conn:
        sender = conn.create_sender("q1")
        for body in ["blue", "red 1", "green", "red 2"]:
            send_accepted(sender, colored(body, body.split()[0]))
        reds = conn.create_receiver("q1", name="reds", options=Selector("color = 'red'"))
        assert echoed_filter_keys(reds) == [symbol("selector")], "the selector echoed as applied"
        for body in ["red 1", "red 2"]:
            assert reds.receive(timeout=DEADLINE_S).body == body
            reds.accept()
        # It has credit and nothing matches: the others stay for a plain receiver, in order.
        plain = conn.create_receiver("q1")
        for body in ["blue", "green"]:
            assert plain.receive(timeout=DEADLINE_S).body == body
            plain.accept()
        plain.close()  # else it competes for the next message
        with pytest.raises(Timeout):
            reds.receive(timeout=0.5)
        send_accepted(sender, colored("red 3", "red"))
        assert reds.receive(timeout=DEADLINE_S).body == "red 3", "a later match arrives"
        reds.accept()


@pytest.mark.broker(topics=[{"name": "t1", "subscriptions": ["s1"]}])
@pytest.mark.parametrize("lane", ["subscription", "dead-letter queue"])
def test_a_subscription_or_dead_letter_receiver_with_a_selector_gets_only_matches(broker, lane):
    with connect(broker) as conn:
        if lane == "subscription":
            sender, path = conn.create_sender("t1"), "t1/Subscriptions/s1"
            for body in ["blue", "red"]:
                send_accepted(sender, colored(body, body))
        else:
            path = "q1/$DeadLetterQueue"
            sender = conn.create_sender("q1")
            for body in ["blue", "red"]:
                send_accepted(sender, colored(body, body))
            taker = conn.create_receiver("q1", credit=2)
            for _ in range(2):
                taker.receive(timeout=DEADLINE_S)
                taker.reject()
            barrier(conn, "q1")
        reds = conn.create_receiver(path, name="reds", options=Selector("color = 'red'"))
        assert reds.receive(timeout=DEADLINE_S).body == "red"
        reds.accept()
        with pytest.raises(Timeout):
            reds.receive(timeout=0.5)
        plain = conn.create_receiver(path, name="plain")
        assert plain.receive(timeout=DEADLINE_S).body == "blue"
        plain.accept()


def test_a_browser_with_a_selector_is_shown_only_matches(broker):
    with connect(broker) as conn:
        sender = conn.create_sender("q1")
        for body in ["red 1", "blue", "red 2"]:
            send_accepted(sender, colored(body, body.split()[0]))
        options = [Copy(), Selector("color = 'red'")]
        browser = conn.create_receiver("q1", name="browser", options=options)
        assert echoed_filter_keys(browser) == [symbol("selector")]
        assert [browser.receive(timeout=DEADLINE_S).body for _ in range(2)] == ["red 1", "red 2"]
        with pytest.raises(Timeout):
            browser.receive(timeout=0.5)
        # Browsing took nothing.
        plain = conn.create_receiver("q1")
        assert plain.receive(timeout=DEADLINE_S).body == "red 1"
        plain.accept()


def test_a_selector_that_does_not_parse_is_refused_with_invalid_field(broker):
    with connect(broker) as conn:
        with pytest.raises(LinkDetached) as refused:
            conn.create_receiver("q1", options=Selector("color = "))
        assert refused.value.condition == "amqp:invalid-field", str(refused.value)
        assert "color = " in str(refused.value)
        assert_round_trip(conn, "q2", "the connection outlives a refused link")


class JmsConsumer(LinkOption):
    """A topic consumer's source as Qpid JMS sends it: durable ones keep unsettled state, never
    expire and ask for copies; capabilities say `topic`, and `shared` / `global` as asked."""

    def __init__(self, durable, *capabilities):
        self.durable = durable
        self.capabilities = ("topic",) + capabilities

    def apply(self, link):
        if self.durable:
            link.source.durability = Terminus.DELIVERIES
            link.source.expiry_policy = Terminus.EXPIRE_NEVER
            link.source.distribution_mode = Terminus.DIST_MODE_COPY
        capabilities = link.source.capabilities
        capabilities.put_array(False, Data.SYMBOL)
        capabilities.enter()
        for capability in self.capabilities:
            capabilities.put_symbol(symbol(capability))
        capabilities.exit()


def detach_keeping(conn, receiver):
    """Detach `receiver` without closing it, as Qpid JMS leaves a durable subscription."""
    receiver.link.detach()
    barrier(conn, receiver.source.address)


def assert_subscription(conn, path, exists):
    """Whether a receiver may attach to `path` (closing it again changes nothing)."""
    if exists:
        conn.create_receiver(path).close()
        return
    with pytest.raises(LinkDetached) as refused:
        conn.create_receiver(path)
    assert refused.value.condition == "amqp:not-found", str(refused.value)


@pytest.mark.broker(topics=[{"name": "t1"}])
def test_a_jms_topic_consumer_takes_from_a_subscription_named_as_service_bus_names_it(broker, client):
    # Qpid JMS attaches a topic consumer to the topic itself; Service Bus Premium makes that a
    # subscription `<name>$<client id>$D` (`$$D` in the global scope), read by any SDK.
    with connect(broker) as conn:
        durable = conn.create_receiver(
            "t1", name="audit|global", options=JmsConsumer(True, "shared", "global"), credit=0
        )
        detach_keeping(conn, durable)
    with client.get_topic_sender("t1") as sender:
        sender.send_messages(ServiceBusMessage("kept for audit"))
    with client.get_subscription_receiver("t1", "audit$$D", max_wait_time=DEADLINE_S) as receiver:
        received = receiver.receive_messages(max_wait_time=DEADLINE_S)
        assert [str(m) for m in received] == ["kept for audit"]
        receiver.complete_message(received[0])


@pytest.mark.broker(topics=[{"name": "t1"}])
def test_a_jms_consumer_on_a_topic_receives_what_is_published_while_it_is_open(broker):
    with connect(broker, container=Container(container_id="cid-1")) as conn:
        consumer = conn.create_receiver("t1", options=JmsConsumer(False))
        send_accepted(conn.create_sender("t1"), Message(body="live"))
        assert consumer.receive(timeout=DEADLINE_S).body == "live"
        consumer.accept()


@pytest.mark.broker(topics=[{"name": "t1"}])
def test_a_jms_topic_consumers_selector_is_its_subscriptions_rule_and_echoed_as_applied(broker):
    with connect(broker, container=Container(container_id="cid-1")) as conn:
        options = [JmsConsumer(True), Selector("color = 'red' AND JMSPriority > 4")]
        consumer = conn.create_receiver("t1", name="reds", options=options)
        echoed = echoed_filter_keys(consumer)
        assert echoed == [symbol("selector")], f"the selector echoed as applied: {echoed}"
        sender = conn.create_sender("t1")
        send_accepted(sender, Message(body="blue", properties={"color": "blue"}, priority=9))
        send_accepted(sender, Message(body="dull red", properties={"color": "red"}, priority=4))
        send_accepted(sender, Message(body="red", properties={"color": "red"}, priority=9))
        assert consumer.receive(timeout=DEADLINE_S).body == "red"
        consumer.accept()
        assert_round_trip(conn, "q1", "only one of three matched")
        with pytest.raises(Timeout):
            consumer.receive(timeout=0.5)


@pytest.mark.broker(topics=[{"name": "t1"}])
def test_a_shared_jms_subscription_in_use_refuses_another_selector(broker):
    # A consumer with another selector would be handed what its own selector filters out.
    shared = JmsConsumer(True, "shared", "global")
    with connect(broker) as conn:
        conn.create_receiver("t1", name="s|global", options=[shared, Selector("a = 1")])
        with pytest.raises(LinkDetached) as refused:
            conn.create_receiver("t1", name="s|global2", options=[shared, Selector("a = 2")])
        assert refused.value.condition == "amqp:resource-locked", str(refused.value)
        conn.create_receiver("t1", name="s|global3", options=[shared, Selector("a = 1")])


@pytest.mark.broker(topics=[{"name": "t1"}])
def test_an_unshared_jms_subscription_takes_one_consumer_at_a_time(broker):
    with connect(broker, container=Container(container_id="cid-1")) as first:
        first.create_receiver("t1", name="solo", options=JmsConsumer(True))
        with connect(broker, container=Container(container_id="cid-1")) as second:
            with pytest.raises(LinkDetached) as refused:
                second.create_receiver("t1", name="solo", options=JmsConsumer(True))
            assert refused.value.condition == "amqp:resource-locked", str(refused.value)
            # Shared ones take many.
            options = JmsConsumer(True, "shared")
            first.create_receiver("t1", name="many", options=options)
            second.create_receiver("t1", name="many|2", options=options)


@pytest.mark.broker(durability="sync", topics=[{"name": "t1"}])
def test_jms_non_durable_subscriptions_go_with_their_last_link_and_never_outlive_the_broker(broker):
    volatile = JmsConsumer(False, "shared", "global")
    with connect(broker) as conn:
        first = conn.create_receiver("t1", name="live|global-volatile1", options=volatile)
        second = conn.create_receiver("t1", name="live|global-volatile2", options=volatile)
        first.close()
        assert_subscription(conn, "t1/Subscriptions/live$$ND", exists=True)
        second.close()
        assert_subscription(conn, "t1/Subscriptions/live$$ND", exists=False)

        durable = conn.create_receiver(
            "t1", name="kept|global", options=JmsConsumer(True, "shared", "global")
        )
        detach_keeping(conn, durable)
        conn.create_receiver("t1", name="left|global-volatile1", options=volatile)
        barrier(conn, "t1")
    broker.kill9()
    broker.start()
    with connect(broker) as conn:
        assert_subscription(conn, "t1/Subscriptions/left$$ND", exists=False)
        assert_subscription(conn, "t1/Subscriptions/kept$$D", exists=True)
        # Closing (not detaching) a durable subscription's link unsubscribes it.
        conn.create_receiver(
            "t1", name="kept|global", options=JmsConsumer(True, "shared", "global")
        ).close()
        assert_subscription(conn, "t1/Subscriptions/kept$$D", exists=False)


def test_200kb_message_over_4096_byte_frames(broker):
    body = bytes(range(256)) * 800  # 204800 bytes
    with connect(broker, max_frame_size=4096) as conn:
        assert conn.conn.transport.max_frame_size == 4096, "precondition: proton offers 4096"
        sender = conn.create_sender("q1")
        receiver = conn.create_receiver("q1")
        send_accepted(sender, Message(id="big", body=body))
        got = receiver.receive(timeout=DEADLINE_S)
        receiver.accept()
        assert got.id == "big"
        assert len(got.body) == len(body) and got.body == body, "the 200 KB body changed"


@pytest.mark.broker(idle_timeout="1s")
@pytest.mark.parametrize("client_idle_timeout", [None, 2], ids=["broker-only", "both-sides"])
def test_idle_timeout_spares_a_heartbeating_client(broker, client_idle_timeout):
    # With heartbeat=2 proton also demands frames from the broker at least every 2 s.
    with connect(broker, heartbeat=client_idle_timeout) as conn:
        advertised = conn.conn.transport.remote_idle_timeout
        assert 0 < advertised <= 1.0, f"broker advertised idle-time-out {advertised} s"
        pump(conn, 4.0)
        assert_round_trip(conn, "q1", "still alive after 4 s")


@pytest.mark.broker(idle_timeout="1s")
def test_idle_timeout_closes_a_silent_client(broker):
    deadline = time.monotonic() + RAW_DEADLINE_S
    with amqp_raw.connect(broker.address, RAW_DEADLINE_S) as sock:
        sock.sendall(amqp_raw.AMQP_HEADER)
        assert amqp_raw.recv_exactly(sock, 8, deadline) == amqp_raw.AMQP_HEADER
        sock.sendall(amqp_raw.open_frame(f"silent-{uuid.uuid4()}"))
        data, closed = amqp_raw.recv_until_closed(sock, deadline)
    assert closed, f"a silent client stayed connected for {RAW_DEADLINE_S} s; got {data!r}"
    codes = amqp_raw.performatives(data)
    assert codes[:1] == [amqp_raw.OPEN], f"expected the broker's open first, got {codes}"
    assert amqp_raw.CLOSE_DESCRIPTOR in data, f"no close performative before EOF: {data!r}"
    assert codes[-1] == amqp_raw.CLOSE, f"expected close as the last frame, got {codes}"


GARBAGE = {
    "huge-frame-size": b"\xff" * 64,
    "undecodable-frame": struct.pack(">IBBH", 64, 2, 0, 0) + b"\xee" * 56,
}


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_after_header_closes_only_that_socket(broker, garbage):
    assert len(garbage) == 64
    with connect(broker) as before:
        assert_round_trip(before, "q1", "before the garbage")
        deadline = time.monotonic() + RAW_DEADLINE_S
        with amqp_raw.connect(broker.address, RAW_DEADLINE_S) as sock:
            sock.sendall(amqp_raw.AMQP_HEADER)
            assert amqp_raw.recv_exactly(sock, 8, deadline) == amqp_raw.AMQP_HEADER
            sock.sendall(garbage)
            data, closed = amqp_raw.recv_until_closed(sock, deadline)
        assert closed, f"the broker kept a garbage-sending socket open; it sent {data!r}"

        assert_round_trip(before, "q1", "after the garbage, old connection")
        with connect(broker) as after:
            assert_round_trip(after, "q2", "after the garbage, new connection")


def test_message_ids_and_partition_keys_over_128_characters_are_rejected(broker):
    # Service Bus's quota; its SDKs refuse such messages before sending them.
    key = symbol("x-opt-partition-key")
    with connect(broker) as conn:
        sender = conn.create_sender("q1")
        send_accepted(sender, Message(id="i" * 128, body="fits", annotations={key: "k" * 128}))
        for message in [
            Message(id="i" * 129, body="long id"),
            Message(id="m", body="long key", annotations={key: "k" * 129}),
        ]:
            with pytest.raises(SendException) as refused:
                sender.send(message)
            assert refused.value.state == Delivery.REJECTED
        assert_round_trip(conn, "q2", "the link still works")
        receiver = conn.create_receiver("q1")
        fitting = receiver.receive(timeout=DEADLINE_S)
        assert fitting.body == "fits"
        receiver.accept()


class _Transacting(MessagingHandler, TransactionHandler):
    """Runs `steps(handler, event)` in one transaction on its own connection, then commits or
    aborts it; records what the broker answered."""

    def __init__(self, url, address, work, commit, via_to=None):
        super().__init__(auto_accept=False, prefetch=0)
        self.url, self.address, self.work, self.commit = url, address, work, commit
        self.via_to = via_to
        self.outcome = None
        self.received = None

    def on_start(self, event):
        self.conn = event.container.connect(self.url)
        options = _TransferDestination(self.via_to) if self.via_to else None
        self.sender = event.container.create_sender(self.conn, self.address, options=options)
        self.receiver = event.container.create_receiver(self.conn, self.address)
        if self.work == "complete":
            self.receiver.flow(1)
        else:
            event.container.declare_transaction(self.conn, handler=self)

    def on_message(self, event):
        self.received = event.delivery
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        txn = event.transaction
        if self.received is not None:
            txn.accept(self.received)
        txn.send(self.sender, Message(body="in-txn"))
        if self.commit:
            txn.commit()
        else:
            txn.abort()

    def on_transaction_committed(self, event):
        self.outcome = "committed"
        self.conn.close()

    def on_transaction_aborted(self, event):
        self.outcome = "aborted"
        self.conn.close()

    def on_transaction_declare_failed(self, event):
        self.outcome = "declare failed"
        self.conn.close()

    def on_transaction_commit_failed(self, event):
        self.outcome = "commit failed"
        self.conn.close()


class _TransferDestination(LinkOption):
    """The link property that makes a sender to the via entity send to `destination`."""

    def __init__(self, destination):
        self.destination = destination

    def apply(self, link):
        key = symbol("com.microsoft:transfer-destination-address")
        link.properties = {key: self.destination}


def _run_transaction(broker, address, work, commit, via_to=None):
    handler = _Transacting(broker.url, address, work, commit, via_to)
    container = Container(handler)
    container.timeout = DEADLINE_S
    container.run()
    return handler.outcome


@pytest.mark.broker(queues=[{"name": "q1", "lock_duration": "1s"}])
def test_transaction_commits_a_completion_and_a_send_together(broker):
    with connect(broker) as conn:
        send_accepted(conn.create_sender("q1"), Message(body="work"))
    assert _run_transaction(broker, "q1", "complete", commit=True) == "committed"
    # Past the work's lock: had its completion not been applied, it would be back first.
    time.sleep(1.5)
    with connect(broker) as conn:
        send_accepted(conn.create_sender("q1"), Message(body="marker"))
        receiver = conn.create_receiver("q1")
        bodies = []
        for _ in range(2):
            bodies.append(receiver.receive(timeout=DEADLINE_S).body)
            receiver.accept()
    assert bodies == ["in-txn", "marker"]


def test_an_aborted_transaction_sends_nothing(broker):
    assert _run_transaction(broker, "q1", "send", commit=False) == "aborted"
    with connect(broker) as conn:
        send_accepted(conn.create_sender("q1"), Message(body="marker"))
        receiver = conn.create_receiver("q1")
        first = receiver.receive(timeout=DEADLINE_S)
        receiver.accept()
    assert first.body == "marker"


def _value_text(message):
    """The text of an amqp-value body proton sent, as the Azure SDK hands it over (bytes)."""
    body = message.body
    return body.decode() if isinstance(body, bytes) else body


@pytest.mark.broker(queues=["q1", "q2", {"name": "sessions", "requires_session": True}])
def test_a_transaction_sends_via_its_entity_and_the_azure_sdk_sees_where_it_went(broker, client):
    with connect(broker) as conn:
        send_accepted(conn.create_sender("q1"), Message(body="work"))
    assert _run_transaction(broker, "q1", "complete", True, via_to="q2") == "committed"
    with client.get_queue_receiver("q2") as receiver:
        moved = receiver.receive_messages(max_wait_time=DEADLINE_S)
        assert [_value_text(message) for message in moved] == ["in-txn"]
        receiver.complete_message(moved[0])
    # The destination refuses a message without a session id for good: the transfer goes to
    # q1's transfer dead-letter queue, which the SDK reads as a sub-queue.
    assert _run_transaction(broker, "q1", "send", True, via_to="sessions") == "committed"
    transfer_dead_letter = ServiceBusSubQueue.TRANSFER_DEAD_LETTER
    with client.get_queue_receiver("q1", sub_queue=transfer_dead_letter) as receiver:
        refused = receiver.receive_messages(max_wait_time=DEADLINE_S)
        assert [_value_text(message) for message in refused] == ["in-txn"]
        assert refused[0].dead_letter_reason == "TransferDestinationRefused"
        receiver.complete_message(refused[0])


@pytest.mark.broker(queues=["q1", {"name": "p", "partitions": 4}])
def test_a_receiver_with_credit_on_a_partitioned_queue_is_attached_before_it_is_delivered_to(
    broker,
):
    # proton grants the credit in the same write as its attach; a partition that registered
    # first delivered before the broker answered the attach, and proton closed the connection
    # with amqp:invalid-field "no such handle" (issue 51).
    # Each round's receiver locks what it was sent and what was on its way to it when it
    # closed, held until the locks expire: plenty of messages for three rounds.
    with connect(broker) as conn:
        sender = conn.create_sender("p")
        for index in range(120):
            send_accepted(sender, numbered("partitioned", index))
    for _ in range(3):
        with connect(broker) as conn:
            receiver = conn.create_receiver("p", credit=10)
            received = receiver.receive(timeout=DEADLINE_S)
            assert received.body.startswith("partitioned"), received.body
            receiver.accept()
