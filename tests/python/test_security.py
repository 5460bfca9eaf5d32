"""Shared access signatures, SASL PLAIN, per-entity rights and TLS, through the official
azure-servicebus SDK and python-qpid-proton.

Brokers here refuse anonymous clients (`allow_anonymous = false`) unless a test says otherwise,
so everything that works went through a verified credential.
"""

import time
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus._pyamqp.utils import generate_sas_token
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)
from proton import ConnectionException, Message, int32
from proton.utils import LinkDetached

from proton_client import DEADLINE_S, assert_round_trip, connect
from sb_common import OPERATION_TIMEOUT_S, RECEIVE_WAIT_S, body_of, open_client
from tidebus_broker import EMULATOR_POLICY, Broker, generate_certificates

ROOT_KEY = EMULATOR_POLICY["key"]
WRITER_KEY = "orders-writer-key-0123456789"
READER_KEY = "namespace-reader-key-0123456789"

# A queue with an entity-level policy that may only send, and a namespace-level Listen policy.
SECURED = {
    "allow_anonymous": False,
    "queues": [
        "q1",
        {
            "name": "orders",
            "shared_access_policies": [
                {"name": "orders-writer", "key": WRITER_KEY, "rights": ["Send"]},
            ],
        },
    ],
    "policies": [
        EMULATOR_POLICY,
        {"name": "reader", "key": READER_KEY, "rights": ["Listen"]},
    ],
}


def client_for(broker, key_name, key, **kwargs):
    """An SDK client in emulator mode (plain AMQP) signing its tokens with `key_name`/`key`."""
    return ServiceBusClient.from_connection_string(
        f"Endpoint=sb://{broker.host}:{broker.port};SharedAccessKeyName={key_name};"
        f"SharedAccessKey={key};UseDevelopmentEmulator=true;",
        retry_total=0,
        try_timeout=OPERATION_TIMEOUT_S,
        **kwargs,
    )


def send_and_take(client, queue, body):
    """Send `body` to `queue`, receive it back and complete it; returns the received body."""
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(body))
    with client.get_queue_receiver(queue, max_wait_time=RECEIVE_WAIT_S) as receiver:
        received = receiver.receive_messages(max_message_count=1)
        assert received, f"nothing came back from {queue}"
        receiver.complete_message(received[0])
        return body_of(received[0])


@pytest.mark.broker(**SECURED)
def test_the_emulator_connection_string_works_with_anonymous_clients_refused(broker):
    with open_client(broker) as client:
        assert send_and_take(client, "q1", "verified") == "verified"
        with client.get_queue_receiver("q1") as receiver:
            assert receiver.peek_messages(max_message_count=5, timeout=OPERATION_TIMEOUT_S) == []


@pytest.mark.broker(**SECURED)
def test_a_wrong_key_raises_the_authentication_error(broker):
    with client_for(broker, "RootManageSharedAccessKey", "not-the-key") as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("forged"))
    with client_for(broker, "NoSuchPolicy", ROOT_KEY) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("forged"))
    with open_client(broker) as client:
        with client.get_queue_receiver("q1", max_wait_time=1) as receiver:
            assert receiver.receive_messages(max_message_count=1) == [], "a forged send got in"


@pytest.mark.broker(**SECURED)
def test_a_token_for_an_entity_that_does_not_exist_is_refused(broker):
    # The Python SDK's own live test_sb_client_bad_entity expects this error.
    with open_client(broker) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("invalid") as sender:
                sender.send_messages(ServiceBusMessage("test"))


@pytest.mark.broker(**SECURED)
def test_a_send_only_entity_policy_can_send_but_not_receive(broker):
    with client_for(broker, "orders-writer", WRITER_KEY) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("an order"))
        with pytest.raises(ServiceBusAuthorizationError) as refused:
            with client.get_queue_receiver("orders", max_wait_time=RECEIVE_WAIT_S) as receiver:
                receiver.receive_messages(max_message_count=1)
        assert "'Listen' claim(s) are required" in str(refused.value), str(refused.value)
        # The policy belongs to `orders`: its tokens reach no other queue.
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("elsewhere"))
    with client_for(broker, "reader", READER_KEY) as client:
        with client.get_queue_receiver("orders", max_wait_time=RECEIVE_WAIT_S) as receiver:
            received = receiver.receive_messages(max_message_count=1)
            assert [body_of(m) for m in received] == ["an order"]
            receiver.complete_message(received[0])
        with pytest.raises(ServiceBusAuthorizationError) as refused:
            with client.get_queue_sender("orders") as sender:
                sender.send_messages(ServiceBusMessage("a reader may not send"))
        assert "'Send' claim(s) are required" in str(refused.value), str(refused.value)


def sas_client(broker, expiry):
    """An SDK client whose connection string carries a ready-made token for the namespace."""
    token = generate_sas_token(
        f"sb://{broker.host}:{broker.port}/", EMULATOR_POLICY["name"], ROOT_KEY, expiry
    )
    return ServiceBusClient.from_connection_string(
        f"Endpoint=sb://{broker.host}:{broker.port};SharedAccessSignature={token};"
        "UseDevelopmentEmulator=true;",
        retry_total=0,
        try_timeout=OPERATION_TIMEOUT_S,
    )


@pytest.mark.broker(**SECURED)
def test_a_shared_access_signature_is_refused_once_expired(broker):
    with sas_client(broker, int(time.time()) + 3600) as client:
        assert send_and_take(client, "q1", "in time") == "in time"
    with sas_client(broker, int(time.time()) - 60) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("too late"))


# --- SASL PLAIN and ANONYMOUS (python-qpid-proton) -----------------------------------------------


@pytest.mark.broker(**SECURED)
def test_sasl_plain_with_a_policy_name_and_key_authenticates_the_connection(broker):
    with connect(
        broker, allowed_mechs="PLAIN", user=EMULATOR_POLICY["name"], password=ROOT_KEY
    ) as conn:
        assert_round_trip(conn, "q1", "over PLAIN")
    with connect(broker, allowed_mechs="PLAIN", user="orders-writer", password=WRITER_KEY) as conn:
        conn.create_sender("orders").send(Message(body="by the writer"))
        with pytest.raises(LinkDetached) as refused:
            conn.create_receiver("orders")
        assert "amqp:unauthorized-access" in str(refused.value), str(refused.value)
        assert "'Listen' claim(s) are required" in str(refused.value), str(refused.value)


@pytest.mark.broker(**SECURED)
def test_a_management_operation_without_its_right_is_answered_401(broker):
    with connect(broker, allowed_mechs="PLAIN", user="orders-writer", password=WRITER_KEY) as conn:
        # A management link needs any right; peeking needs Listen, which a writer lacks.
        requests = conn.create_sender("orders/$management")
        replies = conn.create_receiver("orders/$management", name="replies")
        requests.send(
            Message(
                id="peek-1",
                reply_to="replies",
                properties={"operation": "com.microsoft:peek-message"},
                body={"from-sequence-number": 1, "message-count": int32(1)},
            )
        )
        reply = replies.receive(timeout=DEADLINE_S)
        assert reply.properties["statusCode"] == 401, reply.properties
        assert "'Listen' claim(s) are required" in reply.properties["statusDescription"]
        assert reply.correlation_id == "peek-1"


@pytest.mark.broker(**SECURED)
def test_sasl_plain_with_a_wrong_pair_is_refused(broker):
    for user, password in [
        (EMULATOR_POLICY["name"], "wrong"),
        ("nobody", ROOT_KEY),
        ("orders-writer", ROOT_KEY),
    ]:
        with pytest.raises(ConnectionException) as refused:
            with connect(broker, allowed_mechs="PLAIN", user=user, password=password):
                pass
        assert "amqp:unauthorized-access" in str(refused.value), str(refused.value)


@pytest.mark.broker(**SECURED)
def test_anonymous_clients_reach_only_cbs_when_anonymous_is_not_allowed(broker):
    with connect(broker, allowed_mechs="ANONYMOUS") as conn:
        for attach in (conn.create_sender, conn.create_receiver):
            with pytest.raises(LinkDetached) as refused:
                attach("q1")
            assert "amqp:unauthorized-access" in str(refused.value), str(refused.value)
        # $cbs stays reachable: that is where a token would be put.
        conn.create_sender("$cbs").close()


@pytest.mark.broker(**{**SECURED, "allow_anonymous": True})
def test_anonymous_clients_may_do_everything_when_allowed_but_bad_credentials_still_fail(broker):
    with connect(broker, allowed_mechs="ANONYMOUS") as conn:
        assert_round_trip(conn, "orders", "anonymous")
    with pytest.raises(ConnectionException):
        with connect(broker, allowed_mechs="PLAIN", user="reader", password="wrong"):
            pass
    with client_for(broker, "reader", "wrong") as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("forged"))


def put_token(conn, audience, token):
    """Put `token` for `audience` on `$cbs` over a proton connection; returns the status code."""
    sender = conn.create_sender("$cbs")
    receiver = conn.create_receiver("$cbs", name="cbs-replies", dynamic=False)
    request = Message(
        id="put-1",
        reply_to="$cbs",
        properties={
            "operation": "put-token",
            "type": "servicebus.windows.net:sastoken",
            "name": audience,
        },
        body=token,
    )
    sender.send(request)
    # The broker sends its answers settled.
    return receiver.receive(timeout=DEADLINE_S).properties["status-code"]


@pytest.mark.broker(**SECURED)
def test_a_link_is_detached_when_its_token_expires_unrenewed_and_no_secret_is_logged(broker):
    with connect(broker, allowed_mechs="ANONYMOUS") as conn:
        audience = f"sb://localhost:{broker.port}/q1"
        expiry = int(time.time()) + 3
        token = generate_sas_token(audience, EMULATOR_POLICY["name"], ROOT_KEY, expiry)
        assert put_token(conn, audience, token) == 202
        receiver = conn.create_receiver("q1")
        sender = conn.create_sender("q1")
        sender.send(Message(body="while the token lasts"))
        assert receiver.receive(timeout=DEADLINE_S).body == "while the token lasts"
        receiver.accept()
        with pytest.raises(LinkDetached) as detached:
            # Waits for the next message; the broker detaches the link at the expiry instead.
            receiver.receive(timeout=DEADLINE_S)
        assert "amqp:unauthorized-access" in str(detached.value), str(detached.value)
        assert time.time() >= expiry - 1, "detached before the token expired"
        signature = token.split("sig=")[1].split("&")[0]
    log = broker.read_log()
    assert "token lapsed" in log, "precondition: the log is the broker's"
    for secret in (ROOT_KEY, WRITER_KEY, READER_KEY, signature, "SharedAccessSignature sr="):
        assert secret not in log, f"{secret!r} is in the broker's log"


# --- TLS ---------------------------------------------------------------------------------------


def test_the_sdk_over_tls_verifies_the_generated_certificate(tmp_path):
    files = generate_certificates(tmp_path / "certs")
    settings = {
        "allow_anonymous": False,
        "tls": {
            "listen": "127.0.0.1:0",
            "cert": str(files["server.pem"]),
            "key": str(files["server-key.pem"]),
        },
    }
    broker = Broker(tmp_path / "broker", settings).start()
    try:
        assert broker.tls_port, "the ready file names the TLS listener"
        connection = (
            f"Endpoint=sb://localhost:{broker.tls_port}/;SharedAccessKeyName="
            f"{EMULATOR_POLICY['name']};SharedAccessKey={ROOT_KEY}"
        )
        options = {
            # The SDK dials 5671 unless told otherwise; the custom endpoint keeps TLS.
            "custom_endpoint_address": f"sb://localhost:{broker.tls_port}",
            "transport_type": TransportType.Amqp,
            "retry_total": 0,
            "try_timeout": OPERATION_TIMEOUT_S,
        }
        untrusted = ServiceBusClient.from_connection_string(connection, **options)
        with untrusted, pytest.raises(Exception) as refused:
            with untrusted.get_queue_sender("q1") as sender:
                sender.send_messages(ServiceBusMessage("unverified"))
        assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value) or "certificate" in repr(
            refused.value
        ).lower(), repr(refused.value)
        trusting = ServiceBusClient.from_connection_string(
            connection, connection_verify=str(files["ca.pem"]), **options
        )
        with trusting as client:
            with client.get_queue_sender("q1") as sender:
                sender.send_messages([ServiceBusMessage(f"over TLS {i}") for i in range(3)])
            with client.get_queue_receiver("q1", max_wait_time=RECEIVE_WAIT_S) as receiver:
                peeked = receiver.peek_messages(max_message_count=3, timeout=OPERATION_TIMEOUT_S)
                assert [body_of(m) for m in peeked] == [f"over TLS {i}" for i in range(3)]
                received = []
                deadline = time.monotonic() + DEADLINE_S
                while len(received) < 3 and time.monotonic() < deadline:
                    received += receiver.receive_messages(max_message_count=3 - len(received))
                assert [body_of(m) for m in received] == [f"over TLS {i}" for i in range(3)]
                receiver.renew_message_lock(received[0], timeout=OPERATION_TIMEOUT_S)
                receiver.complete_message(received[0])
                receiver.abandon_message(received[1])
                receiver.dead_letter_message(received[2], reason="tls-test")
    finally:
        broker.stop()
    assert "unverified" not in Path(broker.log_path).read_text(errors="replace")
