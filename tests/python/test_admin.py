"""The administration endpoint through the official SDK's `ServiceBusAdministrationClient`,
over HTTPS with a `tidebus gen-cert` certificate (the client speaks HTTPS only).

One broker serves the module: TLS on, anonymous clients refused, `sync` durability (a created
queue must survive a restart).
"""

import base64
import subprocess
from xml.etree import ElementTree
from datetime import datetime, timedelta, timezone

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import (
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    ServiceBusError,
)
from azure.servicebus.management import (
    AccessRights,
    ApiVersion,
    AuthorizationRule,
    CorrelationRuleFilter,
    EntityStatus,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

from sb_common import RECEIVE_WAIT_S, now_utc, open_client, receive_exactly
from tidebus_broker import EMULATOR_POLICY, Broker, broker_binary

KEY = EMULATOR_POLICY["key"]
# A namespace policy that may send and listen but not manage.
NO_MANAGE = {"name": "no-manage", "key": "no-manage-key-0123456789", "rights": ["Send", "Listen"]}


@pytest.fixture
def secured(tmp_path):
    """A broker with TLS and an administration endpoint, and the CA that signed its
    certificate."""
    broker = secured_broker(tmp_path)
    yield broker
    broker.stop()


@pytest.fixture
def crowded(tmp_path):
    """A secured broker whose namespace holds four entities at most."""
    broker = secured_broker(tmp_path, max_entities=4)
    yield broker
    broker.stop()


def secured_broker(tmp_path, policies=None, **settings):
    """A started broker with TLS, an administration endpoint, `settings` and `policies` (the
    emulator's root policy by default), its `ca` set to the CA that signed its certificate."""
    certificates = tmp_path / "certs"
    subprocess.run(
        [broker_binary(), "gen-cert", "--host", "localhost", "--out", str(certificates)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    settings = {
        **settings,
        "durability": "sync",
        "allow_anonymous": False,
        "tls": {
            "listen": "127.0.0.1:0",
            "cert": str(certificates / "server.pem"),
            "key": str(certificates / "server-key.pem"),
        },
    }
    topics = [{"name": "events", "subscriptions": ["all", "picky"]}]
    broker = Broker(
        tmp_path / "broker", settings, queues=["declared"], topics=topics, policies=policies
    ).start()
    broker.ca = str(certificates / "ca.pem")
    return broker


def admin(broker, key=KEY, key_name=EMULATOR_POLICY["name"], **options):
    assert broker.admin_port, "the ready file names the administration endpoint"
    return ServiceBusAdministrationClient.from_connection_string(
        f"Endpoint=sb://localhost:{broker.admin_port}/;"
        f"SharedAccessKeyName={key_name};SharedAccessKey={key}",
        connection_verify=broker.ca,
        retry_total=0,
        **options,
    )


def test_namespace_and_declared_entities_are_described(secured):
    with admin(secured) as client:
        namespace = client.get_namespace_properties()
        assert namespace.messaging_sku == "Standard"
        queue = client.get_queue("declared")
        assert queue.name == "declared"
        assert queue.lock_duration == timedelta(minutes=1)
        assert queue.max_delivery_count == 10
        assert not queue.requires_session
        assert [q.name for q in client.list_queues()] == ["declared"]


def test_a_queue_created_at_run_time_is_used_counted_deleted(secured):
    with admin(secured) as client:
        created = client.create_queue(
            "made", max_delivery_count=4, lock_duration=timedelta(seconds=30)
        )
        assert (created.name, created.max_delivery_count) == ("made", 4)
        assert client.get_queue("made").lock_duration == timedelta(seconds=30)
        with pytest.raises(ResourceExistsError):
            client.create_queue("made")
        with pytest.raises(ResourceExistsError):
            client.create_queue("DECLARED")
        assert sorted(q.name for q in client.list_queues()) == ["declared", "made"]

        with open_client(secured) as data:
            with data.get_queue_sender("made") as sender:
                sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
                far = now_utc() + timedelta(hours=1)
                sender.schedule_messages(ServiceBusMessage("later"), far)
            with data.get_queue_receiver("made", max_wait_time=RECEIVE_WAIT_S) as receiver:
                first = receive_exactly(receiver, 1)[0]
                receiver.dead_letter_message(first, reason="admin-test")
        runtime = client.get_queue_runtime_properties("made")
        assert runtime.active_message_count == 2
        assert runtime.dead_letter_message_count == 1
        assert runtime.scheduled_message_count == 1
        assert runtime.total_message_count == 4
        assert runtime.size_in_bytes > 0
        assert runtime.accessed_at_utc > now_utc() - timedelta(minutes=5), "used just now"

        client.delete_queue("made")
        with pytest.raises(ResourceNotFoundError):
            client.get_queue("made")
        with pytest.raises(ResourceNotFoundError):
            client.delete_queue("made")


def test_max_delivery_count_takes_service_bus_s_range(secured):
    # NServiceBus sets .NET's int.MaxValue; Service Bus refuses more.
    with admin(secured) as client:
        created = client.create_queue("patient", max_delivery_count=2**31 - 1)
        assert created.max_delivery_count == 2**31 - 1
        assert client.get_queue("patient").max_delivery_count == 2**31 - 1
        with pytest.raises(HttpResponseError, match="1 to 2147483647"):
            client.create_queue("impatient", max_delivery_count=2**31)
        with pytest.raises(HttpResponseError, match="1 to 2147483647"):
            client.create_queue("impatient", max_delivery_count=0)


def set_status(client, queue, status):
    properties = client.get_queue(queue)
    properties.status = status
    client.update_queue(properties)
    assert client.get_queue(queue).status == status


def test_a_queue_s_status_is_read_and_applied_live(secured):
    with admin(secured) as client, open_client(secured) as data:
        client.create_queue("paused")
        assert client.get_queue("paused").status == EntityStatus.ACTIVE
        with data.get_queue_sender("paused") as sender:
            sender.send_messages([ServiceBusMessage("first"), ServiceBusMessage("second")])

        set_status(client, "paused", EntityStatus.SEND_DISABLED)
        with data.get_queue_sender("paused") as sender:
            with pytest.raises(MessagingEntityDisabledError, match="disabled for Send operations"):
                sender.send_messages(ServiceBusMessage("refused"))
        with data.get_queue_receiver("paused", max_wait_time=RECEIVE_WAIT_S) as receiver:
            (first,) = receive_exactly(receiver, 1)
            receiver.complete_message(first)
            # A receiver attached when receiving is disabled is detached, told why.
            set_status(client, "paused", EntityStatus.RECEIVE_DISABLED)
            with pytest.raises(MessagingEntityDisabledError, match="disabled for Receive"):
                receiver.receive_messages(max_wait_time=RECEIVE_WAIT_S)
        with data.get_queue_sender("paused") as sender:
            sender.send_messages(ServiceBusMessage("third"))

        set_status(client, "paused", EntityStatus.DISABLED)
        # A receiver attaching while receiving is disabled is refused at its attach.
        with pytest.raises(MessagingEntityDisabledError, match="is currently disabled\\."):
            with data.get_queue_receiver("paused", max_wait_time=RECEIVE_WAIT_S) as receiver:
                receiver.receive_messages()

        set_status(client, "paused", EntityStatus.ACTIVE)
        with data.get_queue_receiver("paused", max_wait_time=RECEIVE_WAIT_S) as receiver:
            left = receive_exactly(receiver, 2)
            assert sorted(str(m) for m in left) == ["second", "third"]
            for message in left:
                receiver.complete_message(message)


def test_topics_and_subscriptions_take_the_statuses_service_bus_gives_them(secured):
    with admin(secured) as client, open_client(secured) as data:
        topic = client.get_topic("events")
        topic.status = EntityStatus.RECEIVE_DISABLED
        with pytest.raises(HttpResponseError, match="send_disabled"):
            client.update_topic(topic)
        subscription = client.get_subscription("events", "all")
        subscription.status = EntityStatus.RECEIVE_DISABLED
        client.update_subscription("events", subscription)
        assert client.get_subscription("events", "all").status == EntityStatus.RECEIVE_DISABLED
        with data.get_topic_sender("events") as sender:
            sender.send_messages(ServiceBusMessage("copied"))
        with pytest.raises(MessagingEntityDisabledError, match="events/subscriptions/all"):
            with data.get_subscription_receiver("events", "all") as receiver:
                receiver.receive_messages(max_wait_time=RECEIVE_WAIT_S)
        with data.get_subscription_receiver("events", "picky", max_wait_time=RECEIVE_WAIT_S) as receiver:
            (copy,) = receive_exactly(receiver, 1)
            receiver.complete_message(copy)

        topic.status = EntityStatus.SEND_DISABLED
        client.update_topic(topic)
        with data.get_topic_sender("events") as sender:
            with pytest.raises(MessagingEntityDisabledError, match="'events' is currently disabled for Send"):
                sender.send_messages(ServiceBusMessage("refused"))


def test_duplicate_detection_is_set_read_updated_and_applied(secured):
    with admin(secured) as client:
        client.create_queue(
            "deduped",
            requires_duplicate_detection=True,
            duplicate_detection_history_time_window=timedelta(seconds=30),
        )
        queue = client.get_queue("deduped")
        assert queue.requires_duplicate_detection
        assert queue.duplicate_detection_history_time_window == timedelta(seconds=30)
        assert not client.get_queue("declared").requires_duplicate_detection
        client.update_queue(queue, duplicate_detection_history_time_window=timedelta(minutes=5))
        updated = client.get_queue("deduped")
        assert updated.duplicate_detection_history_time_window == timedelta(minutes=5)
        topic = client.create_topic("deduped-events", requires_duplicate_detection=True)
        assert topic.requires_duplicate_detection
        assert topic.duplicate_detection_history_time_window == timedelta(minutes=10), "default"
        with pytest.raises(HttpResponseError) as refused:
            client.create_queue(
                "too-long", duplicate_detection_history_time_window=timedelta(days=8)
            )
        assert refused.value.status_code == 400
        assert "duplicate_detection_history_time_window" in str(refused.value)

        with open_client(secured) as data:
            with data.get_queue_sender("deduped") as sender:
                for body in ["kept", "dropped"]:
                    sender.send_messages(ServiceBusMessage(body, message_id="same"))
        assert client.get_queue_runtime_properties("deduped").active_message_count == 1


def test_enable_express_is_set_read_updated_and_survives_a_restart(secured):
    with admin(secured) as client:
        client.create_queue("express", enable_express=True)
        assert client.get_queue("express").enable_express
        assert not client.get_queue("declared").enable_express
        topic = client.create_topic("express-events", enable_express=True)
        assert topic.enable_express
        assert topic.support_ordering, "by default"
        client.update_topic(
            topic, enable_express=False, support_ordering=False, enable_batched_operations=False
        )
        updated = client.get_topic("express-events")
        assert (updated.enable_express, updated.support_ordering) == (False, False)
        assert not updated.enable_batched_operations
        subscription = client.create_subscription("express-events", "s")
        assert subscription.enable_batched_operations, "by default"
        client.update_subscription("express-events", subscription, enable_batched_operations=False)
        assert not client.get_subscription("express-events", "s").enable_batched_operations
        with open_client(secured) as data:
            with data.get_queue_sender("express") as sender:
                sender.send_messages(ServiceBusMessage("acknowledged once written"))
    secured.stop()
    secured.start()
    with admin(secured) as client:
        queue = client.get_queue("express")
        assert queue.enable_express, "kept across a restart"
        client.update_queue(queue, enable_express=False, enable_batched_operations=False)
        updated = client.get_queue("express")
        assert (updated.enable_express, updated.enable_batched_operations) == (False, False)
        assert client.get_queue_runtime_properties("express").active_message_count == 1


def entity_client(broker, policy, key):
    """A `ServiceBusClient` signing with an entity's own policy."""
    return ServiceBusClient.from_connection_string(
        f"Endpoint=sb://{broker.host}:{broker.port};SharedAccessKeyName={policy};"
        f"SharedAccessKey={key};UseDevelopmentEmulator=true;",
        retry_total=0,
    )


def test_authorization_rules_are_the_entity_s_policies_live_and_across_a_restart(secured):
    writer = AuthorizationRule(
        type="SharedAccessAuthorizationRule",
        key_name="writer",
        rights=[AccessRights.SEND],
        primary_key="writer-primary-key",
        secondary_key="writer-secondary-key",
    )
    reader = AuthorizationRule(key_name="reader", rights=[AccessRights.LISTEN])
    with admin(secured) as client:
        client.create_queue("guarded", authorization_rules=[writer])
        rules = client.get_queue("guarded").authorization_rules
        assert [(r.key_name, r.rights, r.primary_key) for r in rules] == [
            ("writer", ["Send"], "writer-primary-key")
        ]
        assert rules[0].secondary_key == "writer-secondary-key"
        # Either key signs; the policy reaches its own queue only.
        for key in ("writer-primary-key", "writer-secondary-key"):
            with entity_client(secured, "writer", key) as data:
                with data.get_queue_sender("guarded") as sender:
                    sender.send_messages(ServiceBusMessage(key))
        with entity_client(secured, "writer", "writer-primary-key") as data:
            with pytest.raises(ServiceBusError):
                with data.get_queue_sender("declared") as sender:
                    sender.send_messages(ServiceBusMessage("elsewhere"))
        # An update replaces the rules; a key left out is made, as Service Bus makes one.
        queue = client.get_queue("guarded")
        queue.authorization_rules = [reader]
        client.update_queue(queue)
        (made,) = client.get_queue("guarded").authorization_rules
        assert (made.key_name, made.rights) == ("reader", ["Listen"])
        assert len(base64.b64decode(made.primary_key)) == 32
        with entity_client(secured, "writer", "writer-primary-key") as data:
            with pytest.raises(ServiceBusError):
                with data.get_queue_sender("guarded") as sender:
                    sender.send_messages(ServiceBusMessage("revoked"))
    secured.stop()
    secured.start()
    with entity_client(secured, "reader", made.primary_key) as data:
        with data.get_queue_receiver("guarded") as receiver:
            assert len(receive_exactly(receiver, 2)) == 2


def test_api_version_2017_04_has_no_max_message_size(secured):
    with admin(secured, api_version=ApiVersion.V2017_04) as client:
        assert client.create_queue("plain-2017").name == "plain-2017"
        with pytest.raises(HttpResponseError) as refused:
            client.create_queue("sized-2017", max_message_size_in_kilobytes=1024)
        assert refused.value.status_code == 400
        assert "MaxMessageSizeInKilobytes" in str(refused.value), str(refused.value)
    with admin(secured) as client:
        assert client.create_queue("sized", max_message_size_in_kilobytes=256).name == "sized"


def test_api_version_2017_04_takes_back_what_it_reads(secured):
    # Service Bus leaves MaxMessageSizeInKilobytes (2021-05) out of 2017-04's descriptions, so
    # a description read at 2017-04 and sent back is accepted.
    with admin(secured, api_version=ApiVersion.V2017_04) as client:
        client.create_queue("round-trip")
        queue = client.get_queue("round-trip")
        assert queue.max_message_size_in_kilobytes is None
        queue.max_delivery_count = 7
        client.update_queue(queue)
        assert client.get_queue("round-trip").max_delivery_count == 7
        topic = client.get_topic("events")
        assert topic.max_message_size_in_kilobytes is None
        topic.default_message_time_to_live = timedelta(hours=1)
        client.update_topic(topic)
        assert client.get_topic("events").default_message_time_to_live == timedelta(hours=1)
    with admin(secured) as client:
        assert client.get_queue("round-trip").max_message_size_in_kilobytes > 0


def test_user_metadata_is_kept_read_back_and_survives_a_restart(secured):
    with admin(secured) as client:
        client.create_queue("noted", user_metadata="queue notes")
        client.create_topic("noted-topic", user_metadata="topic notes")
        client.create_subscription("noted-topic", "sub", user_metadata="subscription notes")
        client.create_subscription("events", "noted", user_metadata="on a declared topic")
        queue = client.get_queue("noted")
        assert queue.user_metadata == "queue notes"
        queue.user_metadata = "changed"
        client.update_queue(queue)
        assert client.get_queue("declared").user_metadata is None
        with pytest.raises(HttpResponseError) as refused:
            client.create_queue("long", user_metadata="x" * 1025)
        assert refused.value.status_code == 400
        assert "is 1025 characters long" in str(refused.value), str(refused.value)
    secured.stop()
    secured.start()
    with admin(secured) as client:
        assert client.get_queue("noted").user_metadata == "changed"
        assert client.get_topic("noted-topic").user_metadata == "topic notes"
        assert client.get_subscription("noted-topic", "sub").user_metadata == "subscription notes"
        assert client.get_subscription("events", "noted").user_metadata == "on a declared topic"


def test_the_entity_quota_refuses_a_creation_past_it_as_service_bus_does(crowded):
    # Two declared (a queue and a topic), room for two more; a partitioned entity counts as
    # its 16 partitions. Service Bus answers 403 with QuotaExceeded.
    with admin(crowded) as client:
        with pytest.raises(HttpResponseError) as refused:
            client.create_queue("wide", enable_partitioning=True)
        assert refused.value.status_code == 403
        assert "QuotaExceeded" in str(refused.value), str(refused.value)
        client.create_queue("third")
        client.create_topic("fourth")
        with pytest.raises(HttpResponseError) as refused:
            client.create_queue("fifth")
        assert refused.value.status_code == 403
        assert "4 of 4 are in use" in str(refused.value), str(refused.value)
        client.delete_topic("fourth")
        client.create_queue("fifth")
        assert sorted(q.name for q in client.list_queues()) == ["declared", "fifth", "third"]


def test_a_created_queue_survives_a_restart(secured):
    with admin(secured) as client:
        client.create_queue("kept", requires_session=True)
        client.create_topic("topic-made")
        client.create_subscription("topic-made", "sub", max_delivery_count=5)
    with open_client(secured) as data:
        with data.get_queue_sender("kept") as sender:
            sender.send_messages(ServiceBusMessage("stored", session_id="s"))
    secured.stop()
    secured.start()
    with admin(secured) as client:
        kept = client.get_queue("kept")
        assert kept.requires_session
        assert client.get_queue_runtime_properties("kept").active_message_count == 1
        assert client.get_topic("topic-made").name == "topic-made"
        assert client.get_subscription("topic-made", "sub").max_delivery_count == 5
        client.delete_topic("topic-made")
        with pytest.raises(ResourceNotFoundError):
            client.get_topic("topic-made")


def test_a_subscription_created_on_a_declared_topic_survives_a_restart(secured):
    with admin(secured) as client:
        client.create_subscription("events", "made", max_delivery_count=3)
        client.delete_subscription("events", "picky")
    with open_client(secured) as data:
        with data.get_topic_sender("events") as sender:
            sender.send_messages(ServiceBusMessage("kept"))
    secured.stop()
    secured.start()
    with admin(secured) as client:
        names = [s.name for s in client.list_subscriptions("events")]
        assert names == ["all", "picky", "made"], "the file's, a deleted one back, and the made one"
        assert client.get_subscription("events", "made").max_delivery_count == 3
        made = client.get_subscription_runtime_properties("events", "made")
        assert made.active_message_count == 1
        picky = client.get_subscription_runtime_properties("events", "picky")
        assert picky.total_message_count == 0, "deleted with its messages, back empty"
    with open_client(secured) as data:
        with data.get_subscription_receiver(
            "events", "made", max_wait_time=RECEIVE_WAIT_S
        ) as receiver:
            got = receive_exactly(receiver, 1)[0]
            assert str(got) == "kept"
            receiver.complete_message(got)

def test_created_at_is_kept_across_a_restart_and_updated_at_moves_with_an_update(secured):
    with admin(secured) as client:
        client.create_queue("timed")
        queue = client.get_queue_runtime_properties("timed")
        topic = client.get_topic_runtime_properties("events")
        subscription = client.get_subscription_runtime_properties("events", "all")
    assert queue.created_at_utc == queue.updated_at_utc
    # Service Bus's zero date until a client uses the entity; a subscription counts as
    # accessed when it is created.
    assert (queue.accessed_at_utc.year, topic.accessed_at_utc.year) == (1, 1)
    assert subscription.accessed_at_utc >= subscription.created_at_utc
    secured.stop()
    secured.start()
    with admin(secured) as client:
        again = client.get_queue_runtime_properties("timed")
        assert (again.created_at_utc, again.updated_at_utc) == (
            queue.created_at_utc,
            queue.updated_at_utc,
        )
        declared = client.get_subscription_runtime_properties("events", "all")
        assert declared.created_at_utc == subscription.created_at_utc, "first seen declared"
        assert client.get_topic_runtime_properties("events").created_at_utc == topic.created_at_utc

        client.update_queue(client.get_queue("timed"), max_delivery_count=3)
        updated = client.get_queue_runtime_properties("timed")
        assert updated.created_at_utc == queue.created_at_utc
        assert updated.updated_at_utc > queue.updated_at_utc
        client.update_subscription(
            "events", client.get_subscription("events", "all"), max_delivery_count=4
        )
        changed = client.get_subscription_runtime_properties("events", "all")
        assert changed.created_at_utc == subscription.created_at_utc
        assert changed.updated_at_utc > subscription.updated_at_utc
        after = client.get_topic_runtime_properties("events")
        assert after.updated_at_utc == topic.updated_at_utc, "a subscription's update is its own"

def test_enable_partitioning_gives_sixteen_partitions_counted_together_and_cannot_change(secured):
    with admin(secured) as client:
        # As Service Bus Standard: the size asked for is each partition's.
        created = client.create_queue("parted", enable_partitioning=True, max_size_in_megabytes=3072)
        assert created.enable_partitioning
        assert created.max_size_in_megabytes == 16 * 3072
        topic = client.create_topic("parted-topic", enable_partitioning=True)
        assert (topic.enable_partitioning, topic.max_size_in_megabytes) == (True, 16 * 1024)
        assert not client.get_queue("declared").enable_partitioning
        with open_client(secured) as data:
            with data.get_queue_sender("parted") as sender:
                for index in range(32):
                    sender.send_messages(ServiceBusMessage(f"m{index}"))
            with data.get_queue_receiver("parted", max_wait_time=RECEIVE_WAIT_S) as receiver:
                received = receive_exactly(receiver, 32)
                partitions = {message.sequence_number >> 48 for message in received}
                assert partitions == set(range(16)), "spread over all sixteen"
                receiver.dead_letter_message(received[0], reason="admin-test")
        runtime = client.get_queue_runtime_properties("parted")
        assert (runtime.active_message_count, runtime.dead_letter_message_count) == (31, 1)
        # Read back and sent again unchanged, the size stays; a new size is per partition.
        described = client.get_queue("parted")
        described.max_delivery_count = 7
        client.update_queue(described)
        assert client.get_queue("parted").max_size_in_megabytes == 16 * 3072
        described = client.get_queue("parted")
        described.max_size_in_megabytes = 1024
        client.update_queue(described)
        assert client.get_queue("parted").max_size_in_megabytes == 16 * 1024
        described.enable_partitioning = False
        with pytest.raises(HttpResponseError) as refused:
            client.update_queue(described)
        assert refused.value.status_code == 400
        # Service Bus's words, a sentence that goes on (the Go client's suite matches "Queue. ").
        assert "Partitioning cannot be changed for Queue. " in str(refused.value)
        declared = client.get_queue("declared")
        declared.enable_partitioning = True
        with pytest.raises(HttpResponseError, match="Partitioning cannot be changed"):
            client.update_queue(declared)
        client.delete_queue("parted")
        with pytest.raises(ResourceNotFoundError):
            client.get_queue_runtime_properties("parted")


def test_what_tidebus_does_not_do_is_refused_naming_it(secured):
    with admin(secured) as client:
        with pytest.raises(HttpResponseError) as refused:
            client.create_queue("dedup", user_metadata="x" * 1025)
        assert refused.value.status_code == 400
        assert "UserMetadata" in str(refused.value), str(refused.value)
        with pytest.raises(HttpResponseError) as refused:
            client.create_queue("bad", lock_duration=timedelta(minutes=10))
        assert refused.value.status_code == 400
        assert "lock_duration" in str(refused.value), str(refused.value)
        with pytest.raises(ResourceNotFoundError):
            client.get_queue("dedup")


def test_a_wrong_key_is_refused(secured):
    with admin(secured, key="not-the-key") as client:
        with pytest.raises(ClientAuthenticationError):
            client.get_queue("declared")


def test_a_credential_without_manage_reads_and_changes_nothing(tmp_path):
    # Service Bus's answers: a queue or topic that does not exist is 404 (read as absent), any
    # other operation 401 naming the claims it needs, a subscription's naming the operation.
    broker = secured_broker(tmp_path, policies=[EMULATOR_POLICY, NO_MANAGE])
    try:
        refusals = {
            "Manage,EntityRead claims required for this operation": [
                lambda client: client.get_queue("declared"),
                lambda client: list(client.list_queues()),
                lambda client: client.get_topic_runtime_properties("events"),
            ],
            "Authorization failed for specified action: Manage,EntityWrite.": [
                lambda client: client.create_queue("never"),
                lambda client: client.create_topic("never"),
            ],
            "Authorization failed for specified action: Manage,EntityDelete.": [
                lambda client: client.delete_queue("declared"),
            ],
            "SubCode=40100: Unauthorized : Unauthorized access for 'GetSubscription' operation": [
                lambda client: client.get_subscription("events", "all"),
                lambda client: client.get_subscription("events", "nowhere"),
            ],
            "Unauthorized access for 'CreateOrUpdateSubscription' operation": [
                lambda client: client.create_subscription("events", "never"),
            ],
            "Unauthorized access for 'DeleteRule' operation": [
                lambda client: client.delete_rule("events", "all", "$Default"),
            ],
        }
        with admin(broker, key=NO_MANAGE["key"], key_name=NO_MANAGE["name"]) as client:
            with pytest.raises(ResourceNotFoundError):
                client.get_queue("nowhere")
            for detail, operations in refusals.items():
                for operation in operations:
                    with pytest.raises(ClientAuthenticationError) as refused:
                        operation(client)
                    assert refused.value.status_code == 401
                    assert detail in str(refused.value), str(refused.value)
        with admin(broker) as client:
            assert sorted(q.name for q in client.list_queues()) == ["declared"]
            assert [t.name for t in client.list_topics()] == ["events"]
            assert [s.name for s in client.list_subscriptions("events")] == ["all", "picky"]
            assert [r.name for r in client.list_rules("events", "all")] == ["$Default"]
    finally:
        broker.stop()


def test_an_update_applies_to_the_live_queue_keeping_messages_and_locks(secured):
    with admin(secured) as client:
        client.create_queue("live", max_delivery_count=2, lock_duration=timedelta(seconds=10))
        with open_client(secured) as data:
            with data.get_queue_sender("live") as sender:
                sender.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
            with data.get_queue_receiver("live", max_wait_time=RECEIVE_WAIT_S) as receiver:
                locked = receive_exactly(receiver, 1)[0]
                queue = client.get_queue("live")
                queue.max_delivery_count = 7
                queue.lock_duration = timedelta(seconds=45)
                queue.default_message_time_to_live = timedelta(hours=2)
                client.update_queue(queue)
                receiver.complete_message(locked)  # the lock taken before the update holds
                renewed = receive_exactly(receiver, 1)[0]
                assert renewed.locked_until_utc - now_utc() > timedelta(seconds=35), (
                    "a lock taken after the update lasts the new duration"
                )
                receiver.complete_message(renewed)
        updated = client.get_queue("live")
        assert updated.max_delivery_count == 7
        assert updated.lock_duration == timedelta(seconds=45)
        assert updated.default_message_time_to_live == timedelta(hours=2)
        updated.requires_session = True
        with pytest.raises(HttpResponseError) as refused:
            client.update_queue(updated)
        expected = "The value for the RequiresSession property of an existing Queue cannot be changed."
        assert expected in str(refused.value), str(refused.value)
        missing = client.get_queue("live")
        missing.name = "nowhere"
        with pytest.raises(ResourceNotFoundError):
            client.update_queue(missing)


def test_rules_are_created_read_listed_and_deleted_and_pick_copies(secured):
    with admin(secured) as client:
        subscription = client.get_subscription("events", "picky")
        assert (subscription.name, subscription.max_delivery_count) == ("picky", 10)
        assert [s.name for s in client.list_subscriptions("events")] == ["all", "picky"]
        client.delete_rule("events", "picky", "$Default")
        client.create_rule(
            "events",
            "picky",
            "red",
            filter=SqlRuleFilter("color = 'red'"),
            action=SqlRuleAction("SET picked = 'yes'"),
        )
        client.create_rule(
            "events",
            "picky",
            "vip",
            filter=CorrelationRuleFilter(label="vip", properties={"level": 3, "tier": "gold"}),
        )
        with pytest.raises(ResourceExistsError):
            client.create_rule("events", "picky", "RED", filter=SqlRuleFilter("1=1"))
        red = client.get_rule("events", "picky", "red")
        assert red.filter.sql_expression == "color = 'red'"
        assert red.action.sql_expression == "SET picked = 'yes'"
        vip = client.get_rule("events", "picky", "vip")
        assert vip.filter.label == "vip"
        assert vip.filter.properties == {"level": 3, "tier": "gold"}
        assert sorted(r.name for r in client.list_rules("events", "picky")) == ["red", "vip"]
        # Across the topic: all's $Default (a true filter counts as SQL) and red; vip.
        runtime = client.get_topic_runtime_properties("events")
        assert (runtime.sql_filter_count, runtime.correlation_filter_count) == (2, 1)
        with pytest.raises(HttpResponseError) as refused:
            client.create_rule("events", "picky", "bad", filter=SqlRuleFilter("color = = 1"))
        assert refused.value.status_code == 400

        with open_client(secured) as data:
            with data.get_topic_sender("events") as sender:
                sender.send_messages(
                    [
                        ServiceBusMessage("red", application_properties={"color": "red"}),
                        ServiceBusMessage("blue", application_properties={"color": "blue"}),
                    ]
                )
            with data.get_subscription_receiver(
                "events", "picky", max_wait_time=RECEIVE_WAIT_S
            ) as receiver:
                got = receive_exactly(receiver, 1)
                assert [str(m) for m in got] == ["red"]
                assert got[0].application_properties[b"picked"] == b"yes"
                receiver.complete_message(got[0])
        assert client.get_subscription_runtime_properties("events", "all").active_message_count == 2

        client.delete_rule("events", "picky", "red")
        with pytest.raises(ResourceNotFoundError):
            client.get_rule("events", "picky", "red")
        with pytest.raises(ResourceNotFoundError):
            client.delete_rule("events", "picky", "red")
        with pytest.raises(ResourceNotFoundError):
            client.get_rule("events", "nowhere", "vip")


def test_rules_are_listed_by_name_and_a_name_taken_is_refused_in_service_bus_s_words(secured):
    # Service Bus lists a subscription's rules by name (the JavaScript SDK's own suite expects
    # correlationRule before sqlRule, created after it), through the rules feed as through
    # enumerate-rules.
    with admin(secured) as client:
        client.create_subscription("events", "Listed")
        client.create_rule("events", "Listed", "sqlRule", filter=SqlRuleFilter("price > 10"))
        client.create_rule(
            "events", "Listed", "correlationRule", filter=CorrelationRuleFilter(correlation_id="c")
        )
        pages = [
            [rule.name for rule in page]
            for page in client.list_rules("events", "Listed", max_page_size=1).by_page()
        ]
        assert pages == [["$Default"], ["correlationRule"], ["sqlRule"]], pages
        with pytest.raises(ResourceExistsError) as taken:
            client.create_rule("events", "Listed", "sqlRule", filter=SqlRuleFilter("1=1"))
        detail = ElementTree.fromstring(taken.value.response.text()).findtext("Detail")
        assert detail.startswith(
            "The messaging entity 'tidebus:Topic:events|listed|sqlRule' already exists."
        ), detail


def test_rule_parameters_times_and_durations_are_kept_across_a_restart_and_applied(secured):
    when = datetime(2020, 7, 5, 11, 12, 13)
    span = timedelta(days=1, hours=2, minutes=3)
    with admin(secured) as client:
        client.create_subscription("events", "params")
        # The subscription's $Default, replaced (a rule it declares comes back at a start).
        rule = client.get_rule("events", "params", "$Default")
        rule.filter = SqlRuleFilter(
            "color = @color AND size > @size", parameters={"@color": "red", "@size": 2}
        )
        rule.action = SqlRuleAction("SET stamped = @when", parameters={"@when": when})
        client.update_rule("events", "params", rule)
        client.create_rule(
            "events", "params", "typed", filter=CorrelationRuleFilter(properties={"at": when, "span": span})
        )
    secured.stop()
    secured.start()
    with admin(secured) as client:
        rule = client.get_rule("events", "params", "$Default")
        assert rule.filter.sql_expression == "color = @color AND size > @size"
        assert rule.filter.parameters == {"@color": "red", "@size": 2}
        assert rule.action.parameters == {"@when": when}
        typed = client.get_rule("events", "params", "typed")
        assert typed.filter.properties == {"at": when, "span": span}
        assert sorted(r.name for r in client.list_rules("events", "params")) == ["$Default", "typed"]
    with open_client(secured) as data:
        with data.get_topic_sender("events") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(name, application_properties={"color": color, "size": size})
                    for name, color, size in [("small", "red", 1), ("big", "red", 3), ("blue", "blue", 5)]
                ]
            )
        with data.get_subscription_receiver("events", "params") as receiver:
            (big,) = receive_exactly(receiver, 1)
            assert str(big) == "big"
            stamped = big.application_properties[b"stamped"]
            assert stamped in (when.replace(tzinfo=timezone.utc), 1_593_947_533_000), stamped
            receiver.complete_message(big)


def test_a_rule_updated_in_place_picks_copies_by_its_new_filter(secured):
    with admin(secured) as client:
        client.delete_rule("events", "picky", "$Default")
        client.create_rule("events", "picky", "red", filter=SqlRuleFilter("color = 'red'"))
        client.create_rule("events", "picky", "never", filter=SqlRuleFilter("1=0"))
        before = client.get_rule("events", "picky", "red")
        before.filter = SqlRuleFilter("color = 'green'")
        before.action = SqlRuleAction("SET picked = 'green'")
        client.update_rule("events", "picky", before)
        after = client.get_rule("events", "picky", "RED")
        assert after.filter.sql_expression == "color = 'green'"
        assert after.action.sql_expression == "SET picked = 'green'"
        assert after.created_at_utc == before.created_at_utc
        # Still one rule of that name (replaced, not added); rules are listed by name.
        assert [r.name for r in client.list_rules("events", "picky")] == ["never", "red"]
        missing = client.get_rule("events", "picky", "never")
        missing.name = "nowhere"
        with pytest.raises(ResourceNotFoundError):
            client.update_rule("events", "picky", missing)

        with open_client(secured) as data:
            with data.get_topic_sender("events") as sender:
                sender.send_messages(
                    [
                        ServiceBusMessage("red", application_properties={"color": "red"}),
                        ServiceBusMessage("green", application_properties={"color": "green"}),
                    ]
                )
            with data.get_subscription_receiver(
                "events", "picky", max_wait_time=RECEIVE_WAIT_S
            ) as receiver:
                got = receive_exactly(receiver, 1)
                assert [str(m) for m in got] == ["green"]
                assert got[0].application_properties[b"picked"] == b"green"
                receiver.complete_message(got[0])
        assert client.get_subscription_runtime_properties("events", "picky").total_message_count == 0

def test_subscriptions_are_created_on_a_live_topic_and_deleted(secured):
    with admin(secured) as client:
        created = client.create_subscription(
            "events", "made", max_delivery_count=3, lock_duration=timedelta(seconds=20)
        )
        assert (created.name, created.max_delivery_count) == ("made", 3)
        with pytest.raises(ResourceExistsError):
            client.create_subscription("events", "MADE")
        with pytest.raises(ResourceNotFoundError):
            client.create_subscription("nowhere", "made")
        names = [s.name for s in client.list_subscriptions("events")]
        assert names == ["all", "picky", "made"]
        assert [r.name for r in client.list_rules("events", "made")] == ["$Default"]
        with open_client(secured) as data:
            with data.get_topic_sender("events") as sender:
                sender.send_messages(ServiceBusMessage("to every subscription"))
            with data.get_subscription_receiver(
                "events", "made", max_wait_time=RECEIVE_WAIT_S
            ) as receiver:
                got = receive_exactly(receiver, 1)[0]
                assert got.locked_until_utc - now_utc() < timedelta(seconds=25)
                receiver.abandon_message(got)
        runtime = client.get_subscription_runtime_properties("events", "made")
        assert runtime.active_message_count == 1
        client.delete_subscription("events", "made")
        with pytest.raises(ResourceNotFoundError):
            client.get_subscription("events", "made")
        with pytest.raises(ResourceNotFoundError):
            client.delete_subscription("events", "made")
        assert [s.name for s in client.list_subscriptions("events")] == ["all", "picky"]


def test_a_subscription_update_applies_to_the_live_subscription_keeping_messages_and_locks(
    secured,
):
    with admin(secured) as client:
        client.create_subscription(
            "events", "live", max_delivery_count=1, lock_duration=timedelta(seconds=10)
        )
        with open_client(secured) as data:
            with data.get_topic_sender("events") as sender:
                sender.send_messages(ServiceBusMessage("kept"))
            with data.get_subscription_receiver(
                "events", "live", max_wait_time=RECEIVE_WAIT_S
            ) as receiver:
                locked = receive_exactly(receiver, 1)[0]
                subscription = client.get_subscription("events", "live")
                subscription.max_delivery_count = 5
                subscription.lock_duration = timedelta(seconds=45)
                client.update_subscription("events", subscription)
                # The lock taken before the update holds; with one delivery allowed the
                # abandoned message would be dead-lettered, with five it comes back.
                receiver.abandon_message(locked)
                again = receive_exactly(receiver, 1)[0]
                assert str(again) == "kept"
                assert again.locked_until_utc - now_utc() > timedelta(seconds=35), (
                    "a lock taken after the update lasts the new duration"
                )
                receiver.complete_message(again)
        updated = client.get_subscription("events", "live")
        assert updated.max_delivery_count == 5
        assert updated.lock_duration == timedelta(seconds=45)
        runtime = client.get_subscription_runtime_properties("events", "live")
        assert (runtime.total_message_count, runtime.dead_letter_message_count) == (0, 0)
        updated.requires_session = True
        with pytest.raises(HttpResponseError) as refused:
            client.update_subscription("events", updated)
        assert refused.value.status_code == 400
        expected = "The value for the RequiresSession property of an existing Subscription cannot be changed."
        assert expected in str(refused.value), str(refused.value)
        missing = client.get_subscription("events", "live")
        missing.name = "nowhere"
        with pytest.raises(ResourceNotFoundError):
            client.update_subscription("events", missing)

def test_deleting_a_queue_detaches_its_receivers_with_not_found(secured):
    with admin(secured) as client:
        client.create_queue("doomed")
        with open_client(secured) as data:
            with data.get_queue_receiver("doomed", max_wait_time=RECEIVE_WAIT_S) as receiver:
                assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
                client.delete_queue("doomed")
                with pytest.raises(MessagingEntityNotFoundError):
                    receiver.receive_messages(max_message_count=1, max_wait_time=RECEIVE_WAIT_S)


def test_lists_are_paged_and_a_topic_is_updated_in_place(secured):
    with admin(secured) as client:
        for n in range(4):
            client.create_queue(f"paged-{n}")
            client.create_subscription("events", f"extra-{n}")
        client.create_topic("second")
        pages = [
            [q.name for q in page] for page in client.list_queues(max_page_size=2).by_page()
        ]
        assert pages == [["declared", "paged-0"], ["paged-1", "paged-2"], ["paged-3"]], pages
        subscriptions = [
            [s.name for s in page]
            for page in client.list_subscriptions("events", max_page_size=3).by_page()
        ]
        assert len(subscriptions) == 2, subscriptions
        assert sum(subscriptions, []) == ["all", "picky"] + [f"extra-{n}" for n in range(4)]
        assert [t.name for t in client.list_topics(max_page_size=1)] == ["events", "second"]

        before = client.get_topic_runtime_properties("events").updated_at_utc
        topic = client.get_topic("events")
        topic.default_message_time_to_live = timedelta(minutes=30)
        topic.max_size_in_megabytes = 2048
        client.update_topic(topic)
        updated = client.get_topic("events")
        assert updated.default_message_time_to_live == timedelta(minutes=30)
        assert updated.max_size_in_megabytes == 2048
        runtime = client.get_topic_runtime_properties("events")
        assert runtime.updated_at_utc > before
        assert runtime.subscription_count == 6
