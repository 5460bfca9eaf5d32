"""The Python SDK's half of the JMS interop tests: not a pytest file (pytest does not collect it),
a script that tests/jms's InteropTest runs as a subprocess against the broker that suite
started (tests/jms/run.sh; `cargo test` runs it through tests/broker/jms_interop.rs).

    python jms_interop.py receive-jms QUEUE KIND=JMSMessageID...
        receives the six JMS message kinds InteropTest sent to QUEUE with the azure-servicebus
        SDK and asserts what the SDK shows of each; exits 1 with the mismatch otherwise.
    python jms_interop.py receive-sessions QUEUE SESSION=TEXT,TEXT...
        receives each session with a session receiver and asserts its JMS texts, in order.
    python jms_interop.py send QUEUE
        sends the SDK messages whose JMS view InteropTest asserts.
    python jms_interop.py receive-subscription TOPIC SUBSCRIPTION TEXT
        asserts that the administration client lists SUBSCRIPTION (the Service Bus subscription
        a JMS consumer made, e.g. audit$cid-x$D) on TOPIC and describes it, then receives from it
        with a subscription receiver the one JMS TextMessage TEXT.

The broker is TIDEBUS_AMQP_URL (amqp://127.0.0.1:PORT), reached with the emulator's connection
string; its administration endpoint is TIDEBUS_ADMIN_URL (https://localhost:PORT), whose
certificate TIDEBUS_ADMIN_CA signed. What is asserted, and where it is documented, is in InteropTest's class comment:
Service Bus's property mapping (MessageId, CorrelationId, Subject, ReplyTo, To, ContentType,
TimeToLive and application properties as the AMQP fields of the same names:
https://learn.microsoft.com/azure/service-bus-messaging/service-bus-messages-payloads), and the
AMQP JMS mapping Qpid JMS writes (each kind's body section and x-opt-jms-msg-type annotation).
The broker must pass every section through untouched; how this SDK decodes them (AMQP strings
inside bodies and application properties as bytes) is the SDK's own, as against Service Bus.
"""

import os
import sys
from datetime import timedelta
from types import SimpleNamespace
from urllib.parse import urlparse

from azure.servicebus import ServiceBusMessage
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from azure.servicebus.management import ServiceBusAdministrationClient

from sb_common import RECEIVE_WAIT_S, open_client

# Qpid JMS's x-opt-jms-msg-type values (the AMQP JMS mapping).
JMS_MSG_TYPE = {"Message": 0, "Object": 1, "Map": 2, "Bytes": 3, "Stream": 4, "Text": 5}

# The typed application properties InteropTest sets on every JMS message (as this SDK decodes
# them: AMQP strings as bytes).
PROPERTIES = {b"count": 7, b"big": 1 << 40, b"flag": True, b"ratio": 1.5}

# What each kind's body is to this SDK: (body type, body).
BODIES = {
    "Message": (AmqpMessageBodyType.VALUE, None),
    "Text": (AmqpMessageBodyType.VALUE, b"text body"),
    "Bytes": (AmqpMessageBodyType.DATA, [b"\x01\x02\x03\xff"]),
    "Map": (AmqpMessageBodyType.VALUE, {b"name": b"v", b"count": 42, b"flag": True}),
    "Stream": (AmqpMessageBodyType.SEQUENCE, [[b"a", 5, 2.5]]),
    # Checked apart: a Java-serialized String.
    "Object": (AmqpMessageBodyType.DATA, None),
}

CONTENT_TYPES = {"Bytes": "application/octet-stream", "Object": "application/x-java-serialized-object"}


def broker():
    url = urlparse(os.environ["TIDEBUS_AMQP_URL"])
    # The emulator's connection string names localhost (the JMS suite's broker is on loopback).
    return SimpleNamespace(host="localhost", port=url.port)


def check(failures, kind, what, got, expected):
    if got != expected:
        failures.append(f"{kind}: {what} is {got!r}, expected {expected!r}")


def receive_jms(queue, ids):
    failures = []
    seen = {}
    with open_client(broker()) as client, client.get_queue_receiver(queue) as receiver:
        while len(seen) < len(ids):
            batch = receiver.receive_messages(max_message_count=10, max_wait_time=RECEIVE_WAIT_S)
            if not batch:
                break
            for message in batch:
                kind = (message.application_properties or {}).get(b"kind", b"?").decode()
                seen[kind] = message
                receiver.complete_message(message)
    check(failures, "all", "the kinds received", sorted(seen), sorted(ids))
    for kind, message in seen.items():
        raw = message.raw_amqp_message
        print(
            f"{kind}: body_type={raw.body_type} body={raw.body!r} message_id={message.message_id!r} "
            f"subject={message.subject!r} correlation_id={message.correlation_id!r} "
            f"reply_to={message.reply_to!r} to={message.to!r} content_type={message.content_type!r} "
            f"ttl={message.time_to_live!r} application_properties={message.application_properties!r} "
            f"annotations={raw.annotations!r}"
        )
        check(failures, kind, "message_id (JMSMessageID)", message.message_id, ids.get(kind))
        check(failures, kind, "subject (JMSType)", message.subject, f"type-{kind}")
        check(failures, kind, "correlation_id (JMSCorrelationID)", message.correlation_id, f"corr-{kind}")
        check(failures, kind, "reply_to (JMSReplyTo)", message.reply_to, "interop-replies")
        check(failures, kind, "to (JMSDestination)", message.to, sys.argv[2])
        check(failures, kind, "content_type", message.content_type, CONTENT_TYPES.get(kind))
        check(failures, kind, "time_to_live", message.time_to_live, timedelta(seconds=600))
        check(failures, kind, "header priority (JMSPriority)", raw.header.priority, 8)
        check(failures, kind, "header durable (PERSISTENT)", raw.header.durable, True)
        properties = dict(message.application_properties or {})
        check(failures, kind, "application property kind", properties.pop(b"kind", None), kind.encode())
        check(failures, kind, "application properties", properties, PROPERTIES)
        annotations = raw.annotations or {}
        check(failures, kind, "x-opt-jms-msg-type", annotations.get(b"x-opt-jms-msg-type"), JMS_MSG_TYPE[kind])
        body_type, body = BODIES[kind]
        check(failures, kind, "body type", raw.body_type, body_type)
        if kind == "Object":
            data = b"".join(raw.body)
            # Java serialization's stream magic and version, then the String's bytes.
            if not (data.startswith(b"\xac\xed\x00\x05") and data.endswith(b"serialized")):
                failures.append(f"Object: body {data!r} is not a serialized Java String 'serialized'")
        else:
            got = raw.body if body_type == AmqpMessageBodyType.VALUE else list(raw.body)
            check(failures, kind, "body", got, body)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print(f"the Python SDK read the {len(seen)} JMS messages right")


def receive_sessions(queue, expected):
    """Receives each session of `expected` ({session id: [texts]}) with a session receiver."""
    failures = []
    with open_client(broker()) as client:
        for session_id, texts in expected.items():
            with client.get_queue_receiver(queue, session_id=session_id) as receiver:
                got = []
                while len(got) < len(texts):
                    batch = receiver.receive_messages(max_message_count=10, max_wait_time=RECEIVE_WAIT_S)
                    if not batch:
                        break
                    for message in batch:
                        print(f"{session_id}: body={message.raw_amqp_message.body!r} session_id={message.session_id!r}")
                        check(failures, session_id, "session_id (JMSXGroupID)", message.session_id, session_id)
                        got.append(message.raw_amqp_message.body)
                        receiver.complete_message(message)
                # A JMS TextMessage is an amqp-value string, which this SDK decodes as bytes.
                check(failures, session_id, "texts in order", got, [text.encode() for text in texts])
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print(f"the Python SDK received {len(expected)} sessions named by JMSXGroupID")


def send(queue):
    # The SDK encodes an int application property as an AMQP int: 32 bits (it refuses 2**40
    # itself), so JMS reads an Integer.
    properties = {"color": "red", "n": 3, "flag": True, "ratio": 0.5}
    messages = [
        ServiceBusMessage(
            "python str body",
            message_id="py-str",
            correlation_id="py-corr",
            subject="py-subject",
            reply_to="interop-replies",
            application_properties=properties,
            time_to_live=timedelta(minutes=10),
        ),
        ServiceBusMessage(
            b"\x00\x01\x02\xff", message_id="py-bytes", content_type="application/octet-stream"
        ),
        ServiceBusMessage("python text/plain body", message_id="py-text", content_type="text/plain"),
        AmqpAnnotatedMessage(
            value_body="python value body",
            properties={"message_id": "py-value", "subject": "py-value-subject"},
        ),
    ]
    with open_client(broker()) as client, client.get_queue_sender(queue) as sender:
        # One at a time, so they are enqueued (and received) in this order.
        for message in messages:
            sender.send_messages(message)
    print(f"sent {len(messages)} messages to {queue}")


def admin_client():
    """The administration client on the suite's HTTPS endpoint, signing as the emulator's policy."""
    url = urlparse(os.environ["TIDEBUS_ADMIN_URL"])
    return ServiceBusAdministrationClient.from_connection_string(
        f"Endpoint=sb://{url.hostname}:{url.port}/;"
        "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE",
        connection_verify=os.environ["TIDEBUS_ADMIN_CA"],
        retry_total=0,
    )


def receive_subscription(topic, subscription, text):
    """The JMS subscription as the SDK sees it: listed, described, and received from."""
    failures = []
    with admin_client() as admin:
        listed = [properties.name for properties in admin.list_subscriptions(topic)]
        print(f"{topic} lists subscriptions {listed!r}")
        check(failures, subscription, "listed on the topic", subscription in listed, True)
        described = admin.get_subscription(topic, subscription)
        check(failures, subscription, "described name", described.name, subscription)
    got = []
    with open_client(broker()) as client, client.get_subscription_receiver(topic, subscription) as receiver:
        while not got:
            batch = receiver.receive_messages(max_message_count=10, max_wait_time=RECEIVE_WAIT_S)
            if not batch:
                break
            for message in batch:
                print(f"{subscription}: body={message.raw_amqp_message.body!r} message_id={message.message_id!r}")
                got.append(message.raw_amqp_message.body)
                receiver.complete_message(message)
    # A JMS TextMessage is an amqp-value string, which this SDK decodes as bytes.
    check(failures, subscription, "bodies received", got, [text.encode()])
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print(f"the Python SDK listed {subscription} on {topic} and received the JMS message from it")


def main():
    command, queue = sys.argv[1], sys.argv[2]
    if command == "receive-jms":
        receive_jms(queue, dict(argument.split("=", 1) for argument in sys.argv[3:]))
    elif command == "receive-sessions":
        receive_sessions(queue, {s: t.split(",") for s, t in (a.split("=", 1) for a in sys.argv[3:])})
    elif command == "send":
        send(queue)
    elif command == "receive-subscription":
        receive_subscription(queue, sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown command {command!r}; see the module's comment")


if __name__ == "__main__":
    main()
