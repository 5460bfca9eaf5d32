package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import jakarta.jms.Connection;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.QueueBrowser;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Deque;
import java.util.List;
import java.util.function.Supplier;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.function.Executable;

/**
 * What every test class shares: the broker's address (from run.sh), connections that are closed
 * after each test, and receives and waits with deadlines.
 *
 * <p>Each test uses queues of its own (declared in entities.toml), so nothing a test leaves
 * behind reaches another. Waits are receives with a timeout or polls of a condition with a
 * deadline, never a fixed sleep.
 */
abstract class JmsTest {
    /** The broker's plain AMQP listener, {@code amqp://127.0.0.1:PORT}. */
    static final String URL = required("TIDEBUS_AMQP_URL");

    /** The emulator's policy (entities.toml), for the tests that sign in with SASL PLAIN. */
    static final String POLICY = "RootManageSharedAccessKey";

    static final String KEY = "SAS_KEY_VALUE";

    /**
     * Options on every connection URI: a broker that does not answer an attach, a send or a
     * close fails the test in seconds (Qpid JMS waits forever by default), and no reconnects
     * (a plain amqp:// URI has none). TIDEBUS_JMS_TRACE=1 logs every frame.
     */
    static final String OPTIONS = "jms.connectTimeout=20000&jms.requestTimeout=20000&jms.closeTimeout=5000"
        + ("1".equals(System.getenv("TIDEBUS_JMS_TRACE")) ? "&amqp.traceFrames=true" : "");

    /** How long a receive waits for a message that should come at once. */
    static final long WAIT_MS = 20_000;

    /** How long a test waits for something the broker does on its own time (a settlement). */
    static final Duration WAIT = Duration.ofMillis(WAIT_MS);

    private final Deque<AutoCloseable> opened = new ArrayDeque<>();

    static String required(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException(name + " is not set: run the suite through tests/jms/run.sh");
        }
        return value;
    }

    /** A factory on the broker's address with {@link #OPTIONS} and {@code extra} ({@code &k=v...}). */
    static JmsConnectionFactory factory(String extra) {
        return new JmsConnectionFactory(URL + "?" + OPTIONS + extra);
    }

    /** Closes {@code resource} after the test, before what was opened earlier. */
    <T extends AutoCloseable> T closing(T resource) {
        opened.push(resource);
        return resource;
    }

    @AfterEach
    void closeConnections() throws Exception {
        Exception first = null;
        while (!opened.isEmpty()) {
            try {
                opened.pop().close();
            } catch (Exception e) {
                if (first == null) {
                    first = e;
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /** A started anonymous connection with {@code extra} options, closed after the test. */
    Connection connection(String extra) throws JMSException {
        Connection connection = closing(factory(extra).createConnection());
        connection.start();
        return connection;
    }

    /** A started anonymous connection, closed after the test. */
    Connection connection() throws JMSException {
        return connection("");
    }

    /** A session in {@code mode} on a connection of its own. */
    Session session(int mode) throws JMSException {
        return connection().createSession(false, mode);
    }

    /** An AUTO_ACKNOWLEDGE session on a connection of its own. */
    Session session() throws JMSException {
        return session(Session.AUTO_ACKNOWLEDGE);
    }

    /** A consumer of {@code queue} in {@code session}. */
    static MessageConsumer consumer(Session session, String queue) throws JMSException {
        return session.createConsumer(session.createQueue(queue));
    }

    /** Sends text messages {@code texts} to {@code queue} on a connection that is closed at once. */
    static void send(String queue, String... texts) throws JMSException {
        try (Connection connection = factory("").createConnection()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = session.createProducer(session.createQueue(queue));
            for (String text : texts) {
                producer.send(session.createTextMessage(text));
            }
        }
    }

    /** Receives from {@code consumer}, failing after {@link #WAIT_MS}. */
    static Message receive(MessageConsumer consumer) throws JMSException {
        Message message = consumer.receive(WAIT_MS);
        assertNotNull(message, "nothing received within " + WAIT_MS + " ms");
        return message;
    }

    /** The text of {@code message}, which must be a TextMessage. */
    static String text(Message message) throws JMSException {
        assertTrue(message instanceof TextMessage, () -> "not a TextMessage: " + message);
        return ((TextMessage) message).getText();
    }

    /** Receives the next message from {@code consumer} and returns its text. */
    static String receiveText(MessageConsumer consumer) throws JMSException {
        return text(receive(consumer));
    }

    /**
     * The texts a {@link QueueBrowser} of {@code queue} shows, on a connection of its own: the
     * broker's view of what the queue holds, locked messages included (a browse is a peek).
     */
    static List<String> browse(String queue) throws JMSException {
        try (Connection connection = factory("").createConnection()) {
            connection.start();
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            try (QueueBrowser browser = session.createBrowser(session.createQueue(queue))) {
                List<String> texts = new ArrayList<>();
                for (Object message : Collections.list(browser.getEnumeration())) {
                    texts.add(text((Message) message));
                }
                return texts;
            }
        }
    }

    /** Browses {@code queue} until it shows nothing, failing after {@link #WAIT}. */
    static void assertEventuallyEmpty(String queue) throws JMSException {
        List<String> left = browse(queue);
        Instant deadline = Instant.now().plus(WAIT);
        while (!left.isEmpty()) {
            if (Instant.now().isAfter(deadline)) {
                fail(queue + " still holds " + left + " after " + WAIT);
            }
            pause();
            left = browse(queue);
        }
    }

    /** Polls {@code condition} every 50 ms until it holds, failing after {@code timeout}. */
    static void eventually(Duration timeout, Supplier<String> what, Condition condition) throws Exception {
        Instant deadline = Instant.now().plus(timeout);
        while (!condition.holds()) {
            if (Instant.now().isAfter(deadline)) {
                fail("not within " + timeout + ": " + what.get());
            }
            pause();
        }
    }

    /** A condition that may throw (a JMS call). */
    interface Condition {
        boolean holds() throws Exception;
    }

    /** The poll interval of {@link #eventually} and {@link #assertEventuallyEmpty}. */
    private static void pause() {
        try {
            Thread.sleep(50);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            fail("interrupted");
        }
    }

    /**
     * Runs {@code action}, which must throw {@code type} (a JMSException or JMSRuntimeException,
     * possibly as the cause of what was thrown); returns it.
     */
    static <T extends Exception> T thrown(Class<T> type, Executable action) {
        try {
            action.execute();
        } catch (Throwable e) {
            for (Throwable cause = e; cause != null; cause = cause.getCause()) {
                if (type.isInstance(cause)) {
                    return type.cast(cause);
                }
            }
            throw new AssertionError("expected a " + type.getSimpleName() + ", got " + e, e);
        }
        throw new AssertionError("expected a " + type.getSimpleName() + ", nothing was thrown");
    }

    /** Asserts {@code message}'s JMSXDeliveryCount and JMSRedelivered. */
    static void assertDeliveryCount(int expected, Message message) throws JMSException {
        assertEquals(expected, message.getIntProperty("JMSXDeliveryCount"), "JMSXDeliveryCount");
        assertEquals(expected > 1, message.getJMSRedelivered(), "JMSRedelivered");
    }
}
