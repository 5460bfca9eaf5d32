package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import jakarta.jms.BytesMessage;
import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.MapMessage;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.StreamMessage;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.qpid.proton.amqp.UnsignedInteger;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * Mixed JMS and Service Bus SDK traffic on one queue, as on Service Bus: what Qpid JMS sends the
 * Python SDK (azure-servicebus 7.15.0) and the JavaScript SDK (@azure/service-bus 7.9.5) read
 * right, and what they send Qpid JMS reads right; and a JMS durable subscription as the Python
 * SDK sees it, an ordinary subscription of its topic.
 *
 * <p>How it runs: run.sh (or `cargo test`'s jms_interop.rs, through run.sh) starts one broker;
 * each test sends from one side and runs the other side's half as a subprocess against the same
 * broker (TIDEBUS_AMQP_URL is inherited): {@code tests/python/jms_interop.py} with the
 * interpreter TIDEBUS_INTEROP_PYTHON names, {@code tests/jms/interop.js} with node and
 * NODE_PATH=TIDEBUS_INTEROP_NODE_PATH. The subprocess asserts what its SDK sees of the JMS
 * messages (exit status 0 or the failure in its output), or sends the SDK messages this class
 * then asserts. Without the interpreter or node_modules the tests are skipped, saying why.
 *
 * <p>What is asserted is what the documented mappings say, which the broker must keep intact:
 * <ul>
 * <li>Service Bus's own property names and their AMQP fields ("Messages, payloads, and
 * serialization", https://learn.microsoft.com/azure/service-bus-messaging/service-bus-messages-payloads):
 * MessageId (message-id), CorrelationId (correlation-id), Subject (subject), ReplyTo (reply-to),
 * To (to), ContentType (content-type), SessionId (group-id), TimeToLive (the header's ttl),
 * application properties.
 * <li>The AMQP JMS mapping Qpid JMS implements (OASIS amqp-bindmap-jms, as Qpid JMS's docs
 * describe it): JMSType is the subject, JMSCorrelationID the correlation-id, JMSReplyTo the
 * reply-to, JMSDestination the to, JMSXGroupID the group-id; each message type's body section and its
 * {@code x-opt-jms-msg-type} annotation (0 Message, 1 Object, 2 Map, 3 Bytes, 4 Stream,
 * 5 Text); a received message-id string without the "ID:" prefix is shown as
 * {@code ID:AMQP_NO_PREFIX:<id>}; a data section is a BytesMessage unless its content-type is
 * text (a TextMessage) or a serialized Java object; an amqp-value string is a TextMessage.
 * </ul>
 * The SDKs' own encodings are theirs, not the broker's: the Python SDK sends a {@code str} body
 * as a data section, the JavaScript SDK JSON-encodes a body that is not a Buffer into a data
 * section; both send a value body only through an AMQP annotated message.
 */
class InteropTest extends JmsTest {
    /** How long one SDK subprocess may run (it connects, sends or receives, and exits). */
    private static final long SUBPROCESS_DEADLINE_S = 60;

    /** The crate root, from which the subprocesses' scripts are found (Maven runs in tests/jms). */
    private static final Path ROOT = Path.of(System.getProperty("user.dir")).resolve("../..").normalize();

    /** The typed application properties every JMS-sent message carries. */
    private static void setProperties(Message message, String kind) throws Exception {
        message.setStringProperty("kind", kind);
        message.setIntProperty("count", 7);
        message.setLongProperty("big", 1L << 40);
        message.setBooleanProperty("flag", true);
        message.setDoubleProperty("ratio", 1.5);
    }

    /** The six JMS kinds, each with its headers and properties, sent to {@code queue}; ids by kind. */
    private static Map<String, String> sendSixKinds(String queue) throws Exception {
        Map<String, String> ids = new LinkedHashMap<>();
        try (var connection = factory("").createConnection()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = session.createProducer(session.createQueue(queue));
            Queue replies = session.createQueue("interop-replies");
            Map<String, Message> messages = new LinkedHashMap<>();
            messages.put("Message", session.createMessage());
            messages.put("Text", session.createTextMessage("text body"));
            BytesMessage bytes = session.createBytesMessage();
            bytes.writeBytes(new byte[] {1, 2, 3, (byte) 0xff});
            messages.put("Bytes", bytes);
            MapMessage map = session.createMapMessage();
            map.setString("name", "v");
            map.setInt("count", 42);
            map.setBoolean("flag", true);
            messages.put("Map", map);
            StreamMessage stream = session.createStreamMessage();
            stream.writeString("a");
            stream.writeInt(5);
            stream.writeDouble(2.5);
            messages.put("Stream", stream);
            messages.put("Object", session.createObjectMessage("serialized"));
            for (Map.Entry<String, Message> entry : messages.entrySet()) {
                String kind = entry.getKey();
                Message message = entry.getValue();
                setProperties(message, kind);
                message.setJMSCorrelationID("corr-" + kind);
                message.setJMSType("type-" + kind);
                message.setJMSReplyTo(replies);
                producer.send(message, DeliveryMode.PERSISTENT, 8, 600_000);
                ids.put(kind, message.getJMSMessageID());
            }
        }
        return ids;
    }

    /** A text and a bytes message for the JavaScript SDK, sent to {@code queue}; ids by kind. */
    private static Map<String, String> sendTextAndBytes(String queue) throws Exception {
        Map<String, String> ids = new LinkedHashMap<>();
        try (var connection = factory("").createConnection()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = session.createProducer(session.createQueue(queue));
            TextMessage text = session.createTextMessage("text for javascript");
            BytesMessage bytes = session.createBytesMessage();
            bytes.writeBytes(new byte[] {1, 2, 3, (byte) 0xff});
            for (Message message : List.of(text, bytes)) {
                String kind = message instanceof TextMessage ? "Text" : "Bytes";
                setProperties(message, kind);
                message.setJMSCorrelationID("corr-" + kind);
                message.setJMSType("type-" + kind);
                message.setJMSReplyTo(session.createQueue("interop-replies"));
                producer.send(message, DeliveryMode.PERSISTENT, 8, 600_000);
                ids.put(kind, message.getJMSMessageID());
            }
        }
        return ids;
    }

    /** `kind=id` arguments for a subprocess. */
    private static List<String> idArguments(Map<String, String> ids) {
        List<String> arguments = new ArrayList<>();
        ids.forEach((kind, id) -> arguments.add(kind + "=" + id));
        return arguments;
    }

    /** The Python interpreter with azure-servicebus, or the test is skipped. */
    private static String python() {
        String python = System.getenv("TIDEBUS_INTEROP_PYTHON");
        Assumptions.assumeTrue(python != null && !python.isEmpty(),
            "TIDEBUS_INTEROP_PYTHON is not set (run.sh sets it when <repo>/target/pyenv exists; `cargo test` builds it)");
        return python;
    }

    /** NODE_PATH with @azure/service-bus, or the test is skipped. */
    private static String nodePath() {
        String path = System.getenv("TIDEBUS_INTEROP_NODE_PATH");
        Assumptions.assumeTrue(path != null && !path.isEmpty(),
            "TIDEBUS_INTEROP_NODE_PATH is not set (run.sh sets it when <repo>/target/js/node_modules exists; `cargo test` installs it)");
        return path;
    }

    /** Runs the Python half: {@code jms_interop.py ARGS...}. */
    private static String runPython(String... arguments) throws Exception {
        List<String> command = new ArrayList<>(List.of(python(), ROOT.resolve("tests/python/jms_interop.py").toString()));
        command.addAll(List.of(arguments));
        return runChecked(command, Map.of("PYTHONDONTWRITEBYTECODE", "1", "PYTHONUNBUFFERED", "1"));
    }

    /** Runs the JavaScript half: {@code node interop.js ARGS...}. */
    private static String runNode(String... arguments) throws Exception {
        List<String> command = new ArrayList<>(List.of("node", ROOT.resolve("tests/jms/interop.js").toString()));
        command.addAll(List.of(arguments));
        return runChecked(command, Map.of("NODE_PATH", nodePath()));
    }

    /**
     * Runs {@code command} with {@code env} added, failing the test with its output unless it
     * exits 0 within {@link #SUBPROCESS_DEADLINE_S}; returns its output (stdout and stderr).
     */
    private static String runChecked(List<String> command, Map<String, String> env) throws Exception {
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        builder.environment().putAll(env);
        Process process = builder.start();
        process.getOutputStream().close();
        ByteArrayOutputStream output = new ByteArrayOutputStream();
        Thread reader = new Thread(() -> {
            try (InputStream in = process.getInputStream()) {
                in.transferTo(output);
            } catch (IOException ignored) {
                // The process was killed; what was read is reported.
            }
        });
        reader.start();
        if (!process.waitFor(SUBPROCESS_DEADLINE_S, TimeUnit.SECONDS)) {
            process.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            reader.join(5_000);
            fail(command + " did not finish within " + SUBPROCESS_DEADLINE_S + " s; killed it. Output:\n"
                + output.toString(StandardCharsets.UTF_8));
        }
        reader.join(5_000);
        String text = output.toString(StandardCharsets.UTF_8);
        // Kept in the class's output file (target/surefire-reports/...InteropTest-output.txt).
        System.out.println("--- " + command + " (exit " + process.exitValue() + ") ---\n" + text);
        assertEquals(0, process.exitValue(), () -> command + " failed:\n" + text);
        return text;
    }

    /** The body of a BytesMessage. */
    private static byte[] bytes(Message message) throws Exception {
        BytesMessage bytes = assertInstanceOf(BytesMessage.class, message);
        byte[] body = new byte[(int) bytes.getBodyLength()];
        bytes.readBytes(body);
        return body;
    }

    /** The name of a message's JMSReplyTo, which must be a queue. */
    private static String replyTo(Message message) throws Exception {
        return assertInstanceOf(Queue.class, message.getJMSReplyTo()).getQueueName();
    }

    @Test
    void theSixJmsKindsAreReadRightByThePythonSdk() throws Exception {
        python();
        Map<String, String> ids = sendSixKinds("interop-jms-to-python");
        List<String> arguments = new ArrayList<>(List.of("receive-jms", "interop-jms-to-python"));
        arguments.addAll(idArguments(ids));
        runPython(arguments.toArray(new String[0]));
        assertEventuallyEmpty("interop-jms-to-python");
    }

    @Test
    void whatThePythonSdkSendsIsReadRightByQpidJms() throws Exception {
        runPython("send", "interop-python-to-jms");
        Session session = session();
        MessageConsumer consumer = consumer(session, "interop-python-to-jms");

        // A str body: the SDK sends it as a data section, which JMS shows as bytes.
        Message str = receive(consumer);
        assertArrayEquals("python str body".getBytes(StandardCharsets.UTF_8), bytes(str));
        assertEquals("ID:AMQP_NO_PREFIX:py-str", str.getJMSMessageID());
        assertEquals("py-corr", str.getJMSCorrelationID());
        assertEquals("py-subject", str.getJMSType());
        assertEquals("interop-replies", replyTo(str));
        assertEquals("red", str.getObjectProperty("color"));
        // The SDK encodes a Python int as an AMQP int.
        assertEquals(3, str.getObjectProperty("n"));
        assertEquals(true, str.getObjectProperty("flag"));
        assertEquals(0.5, str.getObjectProperty("ratio"));
        long expiration = str.getJMSExpiration();
        long now = System.currentTimeMillis();
        assertTrue(expiration > now && expiration <= now + 600_000,
            "JMSExpiration " + expiration + " is within the SDK's 10 minute time to live of now " + now);

        // A bytes body with content_type application/octet-stream: a BytesMessage.
        Message raw = receive(consumer);
        assertArrayEquals(new byte[] {0, 1, 2, (byte) 0xff}, bytes(raw));
        assertEquals("ID:AMQP_NO_PREFIX:py-bytes", raw.getJMSMessageID());
        assertEquals(null, raw.getJMSCorrelationID());
        assertEquals(null, raw.getJMSType());

        // A str body with content_type text/plain: a TextMessage.
        Message plain = receive(consumer);
        assertEquals("python text/plain body", text(plain));
        assertEquals("ID:AMQP_NO_PREFIX:py-text", plain.getJMSMessageID());

        // An AMQP value body (AmqpAnnotatedMessage): a TextMessage.
        Message value = receive(consumer);
        assertEquals("python value body", text(value));
        assertEquals("ID:AMQP_NO_PREFIX:py-value", value.getJMSMessageID());
        assertEquals("py-value-subject", value.getJMSType());
    }

    /**
     * JMSXGroupID is the AMQP group-id, which Service Bus reads as the SessionId ("Messages,
     * payloads, and serialization": SessionId (group-id)): JMS messages with a group id sent to
     * a session-enabled queue are received by the Python SDK's session receiver for that
     * session, in order.
     */
    @Test
    void aJmsGroupIdIsTheSessionTheSdkReceivesFrom() throws Exception {
        python();
        try (var connection = factory("").createConnection()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = session.createProducer(session.createQueue("interop-jms-sessions"));
            for (String[] groupAndText : List.of(new String[] {"group-b", "b-1"}, new String[] {"group-a", "a-1"},
                new String[] {"group-a", "a-2"}, new String[] {"group-b", "b-2"})) {
                TextMessage message = session.createTextMessage(groupAndText[1]);
                message.setStringProperty("JMSXGroupID", groupAndText[0]);
                producer.send(message);
            }
        }
        // (No browse afterwards: a QueueBrowser is a receiver without a session, which a
        // session-enabled queue refuses, as Service Bus does.)
        runPython("receive-sessions", "interop-jms-sessions", "group-a=a-1,a-2", "group-b=b-1,b-2");
    }

    /**
     * A JMS subscription is an ordinary Service Bus subscription to the other SDKs: after a
     * durable consumer of connection "cid-x" on subscription "audit" closed, the Python SDK's
     * administration client lists {@code audit$cid-x$D} ("Representation of client scoped
     * subscriptions": {@code <SUBSCRIPTION-NAME>$<CLIENT-ID>$D}) on the topic, and its
     * subscription receiver gets what a JMS producer published meanwhile. Once the SDK took the
     * message, the JMS consumer finds the subscription empty; then it is unsubscribed.
     */
    @Test
    void aJmsDurableSubscriptionIsAServiceBusSubscriptionThePythonSdkReceivesFrom() throws Exception {
        python();
        Connection connection = closing(factory("").createConnection());
        connection.setClientID("cid-x");
        connection.start();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic topic = session.createTopic("interop-audit");
        session.createDurableConsumer(topic, "audit").close();
        session.createProducer(topic).send(session.createTextMessage("audited by the sdk"));

        runPython("receive-subscription", "interop-audit", "audit$cid-x$D", "audited by the sdk");

        MessageConsumer consumer = session.createDurableConsumer(topic, "audit");
        assertNull(consumer.receive(1_000), "the SDK completed the subscription's only message");
        consumer.close();
        session.unsubscribe("audit");
    }

    @Test
    void aJmsTextAndBytesMessageAreReadRightByTheJavaScriptSdk() throws Exception {
        nodePath();
        Map<String, String> ids = sendTextAndBytes("interop-jms-to-js");
        List<String> arguments = new ArrayList<>(List.of("receive-jms", "interop-jms-to-js"));
        arguments.addAll(idArguments(ids));
        runNode(arguments.toArray(new String[0]));
        assertEventuallyEmpty("interop-jms-to-js");
    }

    @Test
    void whatTheJavaScriptSdkSendsIsReadRightByQpidJms() throws Exception {
        runNode("send", "interop-js-to-jms");
        Session session = session();
        MessageConsumer consumer = consumer(session, "interop-js-to-jms");

        // A string body: the SDK JSON-encodes it into a data section, quotes and all.
        Message json = receive(consumer);
        assertArrayEquals("\"js string body\"".getBytes(StandardCharsets.UTF_8), bytes(json));
        assertEquals("ID:AMQP_NO_PREFIX:js-str", json.getJMSMessageID());
        assertEquals("js-corr", json.getJMSCorrelationID());
        assertEquals("js-subject", json.getJMSType());
        assertEquals("interop-replies", replyTo(json));
        assertEquals("green", json.getObjectProperty("color"));
        // rhea (the SDK's AMQP library) encodes a positive whole number as an AMQP uint, which
        // Qpid JMS hands over as proton's UnsignedInteger, not one of JMS's property types: a
        // JMS reader takes it with getObjectProperty (getIntProperty refuses it).
        assertEquals(UnsignedInteger.valueOf(5), json.getObjectProperty("n"));
        assertEquals(false, json.getObjectProperty("flag"));
        assertEquals(0.75, json.getObjectProperty("ratio"));

        // A Buffer body: its bytes in a data section.
        Message buffer = receive(consumer);
        assertArrayEquals(new byte[] {0, 1, 2, (byte) 0xff}, bytes(buffer));
        assertEquals("ID:AMQP_NO_PREFIX:js-buffer", buffer.getJMSMessageID());

        // An AMQP value body (AmqpAnnotatedMessage, bodyType "value"): a TextMessage.
        Message value = receive(consumer);
        assertEquals("js value body", text(value));
        assertEquals("ID:AMQP_NO_PREFIX:js-value", value.getJMSMessageID());
        assertEquals("js-value-subject", value.getJMSType());
    }
}
