package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.servicebus.jms.ServiceBusJmsConnectionFactory;
import com.azure.servicebus.jms.ServiceBusJmsConnectionFactorySettings;
import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.JMSConsumer;
import jakarta.jms.JMSContext;
import jakarta.jms.JMSSecurityException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.HashMap;
import java.util.Map;
import org.apache.qpid.jms.policy.JmsDefaultPrefetchPolicy;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Microsoft's azure-servicebus-jms 2.1.0 ({@code com.azure:azure-servicebus-jms}, the library
 * Microsoft's "Use Java Message Service 2.0 API with Azure Service Bus Premium" page tells
 * users to connect with: https://learn.microsoft.com/azure/service-bus-messaging/how-to-use-java-message-service-20)
 * against the broker's TLS listener, signing in with the emulator policy's name and key.
 *
 * <p>The library builds {@code amqps://HOST} and nothing else: from a connection string it keeps
 * the host and drops the port (see {@link #aConnectionStringLosesItsPort}), so these tests give
 * the {@code (sasKeyName, sasKey, host, settings)} constructor {@code localhost:PORT}, the TLS
 * listener run.sh started (TIDEBUS_AMQPS_HOST), whose certificate run.sh's trust store holds.
 * The settings turn the library's default failover wrapper off, so a refusal surfaces at once
 * instead of being retried, and bound Qpid JMS's waits as {@link JmsTest#OPTIONS} does.
 */
class AzureServiceBusJmsTest extends JmsTest {
    /** {@code localhost:PORT}, the broker's TLS listener. */
    static final String HOST = required("TIDEBUS_AMQPS_HOST");

    /** The library's settings with reconnects off and Qpid JMS's waits bounded. */
    static ServiceBusJmsConnectionFactorySettings settings() {
        // Qpid JMS options the library adds to its URI, after its own defaults (prefetch 0).
        Map<String, String> options = new HashMap<>();
        options.put("jms.connectTimeout", "20000");
        options.put("jms.requestTimeout", "20000");
        options.put("jms.closeTimeout", "5000");
        ServiceBusJmsConnectionFactorySettings settings = new ServiceBusJmsConnectionFactorySettings(options);
        settings.setShouldReconnect(false);
        settings.setConnectionIdleTimeoutMS(60_000);
        settings.setTraceFrames("1".equals(System.getenv("TIDEBUS_JMS_TRACE")));
        return settings;
    }

    /** A factory signing in as the emulator's policy with {@code key}. */
    static ServiceBusJmsConnectionFactory serviceBusFactory(String key) {
        return new ServiceBusJmsConnectionFactory(POLICY, key, HOST, settings());
    }

    /** A started connection through the library with the right key, closed after the test. */
    Connection serviceBusConnection() throws Exception {
        Connection connection = closing(serviceBusFactory(KEY).createConnection());
        connection.start();
        return connection;
    }

    @Test
    @Tag("smoke")
    void aQueueSendAndReceiveThroughTheLibraryOverTls() throws Exception {
        ServiceBusJmsConnectionFactory factory = serviceBusFactory(KEY);
        // What the library dials: TLS to the host given, with its own default of no prefetch.
        String uri = factory.getRemoteConnectionUri();
        assertTrue(uri.startsWith("amqps://" + HOST + "?"), uri);
        assertTrue(uri.contains("jms.prefetchPolicy.all=0"), uri);

        try (JMSContext context = factory.createContext()) {
            Queue queue = context.createQueue("sbjms-queue");
            context.createProducer().send(queue, "through azure-servicebus-jms");
            String body = context.createConsumer(queue).receiveBody(String.class, WAIT_MS);
            assertEquals("through azure-servicebus-jms", body);
            assertEquals("QpidJMS", context.getMetaData().getJMSProviderName());
        }
        // Nothing left behind: the receive completed the message.
        assertEventuallyEmpty("sbjms-queue");
    }

    /**
     * The JMS headers and properties the library's Qpid JMS maps onto the AMQP message, as they
     * arrive through the library: the broker keeps each of them.
     */
    @Test
    void theJmsHeadersAndPropertiesArriveAsSent() throws Exception {
        Session session = serviceBusConnection().createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue("sbjms-headers");
        Queue replies = session.createQueue("sbjms-replies");
        TextMessage sent = session.createTextMessage("headers");
        sent.setJMSCorrelationID("sbjms-corr");
        sent.setJMSType("sbjms-type");
        sent.setJMSReplyTo(replies);
        sent.setStringProperty("color", "blue");
        sent.setIntProperty("count", 3);
        sent.setLongProperty("big", 1L << 40);
        sent.setBooleanProperty("flag", true);
        sent.setDoubleProperty("ratio", 0.25);
        long before = System.currentTimeMillis();
        session.createProducer(queue).send(sent, DeliveryMode.PERSISTENT, 6, 60_000);
        long after = System.currentTimeMillis();

        Message got = receive(session.createConsumer(queue));
        assertEquals("headers", text(got));
        assertEquals(sent.getJMSMessageID(), got.getJMSMessageID());
        assertTrue(got.getJMSMessageID().startsWith("ID:"), got.getJMSMessageID());
        assertEquals("sbjms-corr", got.getJMSCorrelationID());
        assertEquals("sbjms-type", got.getJMSType());
        assertEquals(6, got.getJMSPriority());
        assertEquals(DeliveryMode.PERSISTENT, got.getJMSDeliveryMode());
        assertEquals(sent.getJMSTimestamp(), got.getJMSTimestamp());
        // The library wraps destinations (ServiceBusJmsQueue), so compare by name.
        assertEquals("sbjms-headers", assertInstanceOf(Queue.class, got.getJMSDestination()).getQueueName());
        assertEquals("sbjms-replies", assertInstanceOf(Queue.class, got.getJMSReplyTo()).getQueueName());
        long expiration = got.getJMSExpiration();
        assertTrue(expiration >= before + 60_000 && expiration <= after + 60_000,
            "JMSExpiration " + expiration + " is the send time (" + before + ".." + after + ") plus the 60 s TTL");
        assertDeliveryCount(1, got);
        assertEquals("blue", got.getStringProperty("color"));
        assertEquals(3, got.getObjectProperty("count"));
        assertEquals(1L << 40, got.getObjectProperty("big"));
        assertEquals(true, got.getObjectProperty("flag"));
        assertEquals(0.25, got.getObjectProperty("ratio"));
    }

    /**
     * The library's default prefetch of 0: a consumer holds no message it has not asked for, so
     * a second consumer gets the next one while the first still has its own. (With Qpid JMS's
     * default of 1000 the first consumer's link would have taken and locked both.)
     */
    @Test
    void withoutPrefetchAConsumerTakesOnlyWhatItReceives() throws Exception {
        assertEquals(0, ((JmsDefaultPrefetchPolicy) serviceBusFactory(KEY).getPrefetchPolicy()).getQueuePrefetch());
        send("sbjms-prefetch0", "first", "second");
        Session first = serviceBusConnection().createSession(false, Session.CLIENT_ACKNOWLEDGE);
        MessageConsumer firstConsumer = first.createConsumer(first.createQueue("sbjms-prefetch0"));
        Message one = receive(firstConsumer);
        assertEquals("first", text(one));

        Session second = serviceBusConnection().createSession(false, Session.CLIENT_ACKNOWLEDGE);
        Message two = receive(second.createConsumer(second.createQueue("sbjms-prefetch0")));
        assertEquals("second", text(two));
        two.acknowledge();
        one.acknowledge();
        assertNull(firstConsumer.receiveNoWait(), "the queue should be empty");
        assertEventuallyEmpty("sbjms-prefetch0");
    }

    /**
     * A shared durable subscription through the library's {@code JMSContext}, its client id set
     * on the factory as the library offers ({@code setClientId}): the broker creates
     * {@code sbjms-shared$sbjms-client$D} on the topic at the first consumer's attach, the
     * subscription keeps what is published while no consumer is open, and
     * {@code unsubscribe} deletes it.
     */
    @Test
    void aSharedDurableSubscriptionThroughTheLibrary() throws Exception {
        ServiceBusJmsConnectionFactory factory = serviceBusFactory(KEY);
        factory.setClientId("sbjms-client");
        try (JMSContext context = factory.createContext()) {
            Topic topic = context.createTopic("sbjms-topic");
            context.createSharedDurableConsumer(topic, "sbjms-shared").close();
            AdminEndpoint.assertSubscriptionExists("sbjms-topic", "sbjms-shared$sbjms-client$D");
            context.createProducer().send(topic, "kept for the library");
            try (JMSConsumer consumer = context.createSharedDurableConsumer(topic, "sbjms-shared")) {
                assertEquals("kept for the library", consumer.receiveBody(String.class, WAIT_MS));
            }
            context.unsubscribe("sbjms-shared");
        }
        AdminEndpoint.assertEventuallyNoSubscription("sbjms-topic", "sbjms-shared$sbjms-client$D");
    }

    /**
     * A queue the library names that does not exist is created, as Service Bus Premium creates
     * the entities azure-servicebus-jms names, with the auto-delete-on-idle time the library's
     * settings ask for ({@code com.microsoft:queue-auto-delete-on-idle-duration-in-seconds} in
     * its {@code open}). Plain Qpid JMS gets InvalidDestinationException instead
     * ({@code DestinationTest}).
     */
    @Test
    void aQueueTheLibraryNamesIsCreatedWithTheAutoDeleteOnIdleItAsks() throws Exception {
        ServiceBusJmsConnectionFactorySettings settings = settings();
        settings.setQueueAutoDeleteOnIdleDurationInSeconds(600);
        ServiceBusJmsConnectionFactory factory = new ServiceBusJmsConnectionFactory(POLICY, KEY, HOST, settings);
        try (JMSContext context = factory.createContext()) {
            Queue queue = context.createQueue("sbjms-made-queue");
            context.createProducer().send(queue, "to a queue made for it");
            assertEquals("to a queue made for it", context.createConsumer(queue).receiveBody(String.class, WAIT_MS));
        }
        String described = AdminEndpoint.describe("sbjms-made-queue");
        assertTrue(described.contains("<AutoDeleteOnIdle>PT10M</AutoDeleteOnIdle>"), described);
    }

    /**
     * A topic the library names that does not exist is created at its first consumer, and the
     * consumer's subscription gets the subscriptions' auto-delete-on-idle time.
     */
    @Test
    void aTopicTheLibraryNamesIsCreatedAndItsSubscriptionsIdleAsAsked() throws Exception {
        ServiceBusJmsConnectionFactorySettings settings = settings();
        settings.setTopicAutoDeleteOnIdleDurationInSeconds(900);
        settings.setSubscriberAutoDeleteOnIdleDurationInSeconds(300);
        ServiceBusJmsConnectionFactory factory = new ServiceBusJmsConnectionFactory(POLICY, KEY, HOST, settings);
        try (JMSContext context = factory.createContext()) {
            Topic topic = context.createTopic("sbjms-made-topic");
            try (JMSConsumer consumer = context.createSharedDurableConsumer(topic, "made")) {
                context.createProducer().send(topic, "to a topic made for it");
                assertEquals("to a topic made for it", consumer.receiveBody(String.class, WAIT_MS));
            }
            String topicEntry = AdminEndpoint.describe("sbjms-made-topic");
            assertTrue(topicEntry.contains("<AutoDeleteOnIdle>PT15M</AutoDeleteOnIdle>"), topicEntry);
            String subscription = AdminEndpoint.describe("sbjms-made-topic/Subscriptions/made$$D");
            assertTrue(subscription.contains("<AutoDeleteOnIdle>PT5M</AutoDeleteOnIdle>"), subscription);
            context.unsubscribe("made");
        }
    }

    @Test
    void aWrongKeyIsRefusedWithASecurityException() {
        thrown(JMSSecurityException.class, () -> closing(serviceBusFactory("not-the-key").createConnection()).start());
    }

    @Test
    void aWrongPolicyNameIsRefusedWithASecurityException() {
        ServiceBusJmsConnectionFactory factory = new ServiceBusJmsConnectionFactory("NoSuchPolicy", KEY, HOST, settings());
        thrown(JMSSecurityException.class, () -> closing(factory.createConnection()).start());
    }

    /**
     * Why the tests pass {@code localhost:PORT} and not a connection string: the library keeps
     * only the host of a connection string's endpoint, so
     * {@code Endpoint=sb://localhost:5672;...;UseDevelopmentEmulator=true} dials
     * {@code amqps://localhost} (5671), TLS whatever the emulator flag says. Client-side only: no
     * connection is made. Should a later version keep the port, this fails and the README's
     * advice can change.
     */
    @Test
    void aConnectionStringLosesItsPort() {
        String connectionString = "Endpoint=sb://localhost:5672;SharedAccessKeyName=" + POLICY
            + ";SharedAccessKey=" + KEY + ";UseDevelopmentEmulator=true;";
        ServiceBusJmsConnectionFactory factory = new ServiceBusJmsConnectionFactory(connectionString, settings());
        String uri = factory.getRemoteConnectionUri();
        assertTrue(uri.startsWith("amqps://localhost?"), uri);
    }
}
