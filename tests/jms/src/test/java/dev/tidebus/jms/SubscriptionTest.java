package dev.tidebus.jms;

import static dev.tidebus.jms.AdminEndpoint.assertEventuallyNoSubscription;
import static dev.tidebus.jms.AdminEndpoint.assertEventuallyNoSubscriptions;
import static dev.tidebus.jms.AdminEndpoint.assertSubscriptionExists;
import static dev.tidebus.jms.AdminEndpoint.subscriptions;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import jakarta.jms.Connection;
import jakarta.jms.InvalidDestinationException;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Topics and JMS topic consumers, as Service Bus Premium serves them: what a JMS producer
 * publishes to a topic reaches the topic's subscriptions, and each JMS subscription is a
 * Service Bus subscription of the topic that the broker creates when a consumer attaches.
 *
 * <p>What is pinned down is Microsoft's "Use Java Message Service 2.0 API with Azure Service Bus
 * Premium" page
 * (https://learn.microsoft.com/azure/service-bus-messaging/java-message-service-20-entities):
 * <ul>
 * <li>a JMS subscription is the Service Bus subscription {@code <name>$<clientID>$D} (durable)
 * or {@code <name>$<clientID>$ND} (non-durable), the client id empty when the connection has
 * none or the subscription is shared without one (Qpid JMS's {@code global} capability), so
 * {@code kept$$D}; a plain {@code createConsumer(topic)}, which names nothing, gets a name the
 * broker makes, ending {@code $$ND} here (its connections have no client id);
 * <li>a durable subscription keeps what is published while no consumer is open, until
 * {@code unsubscribe} deletes it; a non-durable one exists while it has consumers (so what is
 * published while it has none is not kept for anyone);
 * <li>consumers of one shared subscription compete (each message to one of them); separate
 * subscriptions each get a copy;
 * <li>an unshared subscription takes one consumer: a second is refused with a JMSException;
 * unsubscribing an active subscription is a JMSException, an unknown one an
 * InvalidDestinationException;
 * <li>a selector is the subscription's rule: only matching messages reach it;
 * <li>noLocal "is currently unsupported and ignored".
 * </ul>
 * Where the behaviour is about a subscription's existence, the broker's administration endpoint
 * ({@link AdminEndpoint}) is asked. Each test has a topic of its own (entities.toml), so no test
 * sees another's messages or subscriptions.
 *
 * <p>Some checks need a second connection with the same client id: Qpid JMS itself refuses a
 * second consumer of an unshared durable subscription, and an unsubscribe of an active one, when
 * they come from the connection that holds the active consumer, before anything reaches the
 * broker; from another connection (a second instance of the same application) only the broker
 * can refuse them.
 */
class SubscriptionTest extends JmsTest {
    /** How long a consumer is given to show that nothing more arrives. */
    private static final long QUIET_MS = 1_000;

    /** A started connection with client id {@code clientId} and {@code extra} options, closed after the test. */
    Connection clientConnection(String clientId, String extra) throws JMSException {
        Connection connection = closing(factory(extra).createConnection());
        connection.setClientID(clientId);
        connection.start();
        return connection;
    }

    /** A started connection with client id {@code clientId}, closed after the test. */
    Connection clientConnection(String clientId) throws JMSException {
        return clientConnection(clientId, "");
    }

    /** Publishes text messages {@code texts} to {@code topic} on a connection that is closed at once. */
    static void publish(String topic, String... texts) throws JMSException {
        try (Connection connection = factory("").createConnection()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = session.createProducer(session.createTopic(topic));
            for (String text : texts) {
                producer.send(session.createTextMessage(text));
            }
        }
    }

    /** Publishes text message {@code text} with string property {@code color} to {@code topic}. */
    static void publishColored(String topic, String text, String color) throws JMSException {
        try (Connection connection = factory("").createConnection()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            TextMessage message = session.createTextMessage(text);
            message.setStringProperty("color", color);
            session.createProducer(session.createTopic(topic)).send(message);
        }
    }

    /** Asserts that {@code consumer} receives nothing more within {@link #QUIET_MS}. */
    static void assertNothingMore(MessageConsumer consumer) throws JMSException {
        Message more = consumer.receive(QUIET_MS);
        assertNull(more, () -> "nothing more was expected, got " + describe(more));
    }

    private static String describe(Message message) {
        try {
            return message instanceof TextMessage ? "'" + ((TextMessage) message).getText() + "'" : String.valueOf(message);
        } catch (JMSException e) {
            return String.valueOf(message);
        }
    }

    /**
     * Receives from two consumers of one shared subscription until {@code sent} arrived, and
     * asserts they split them: each text to exactly one consumer, each consumer some (their
     * prefetch of 1, see {@link #ONE_PREFETCHED}, makes sure of that), and nothing more.
     */
    static void assertSplit(List<String> sent, MessageConsumer first, MessageConsumer second) throws Exception {
        List<String> toFirst = new ArrayList<>();
        List<String> toSecond = new ArrayList<>();
        Instant deadline = Instant.now().plus(WAIT);
        while (toFirst.size() + toSecond.size() < sent.size()) {
            if (Instant.now().isAfter(deadline)) {
                fail("not all of " + sent + " within " + WAIT + ": the first consumer got " + toFirst
                    + ", the second " + toSecond);
            }
            Message message = first.receive(100);
            if (message != null) {
                toFirst.add(text(message));
            }
            message = second.receive(100);
            if (message != null) {
                toSecond.add(text(message));
            }
        }
        assertNothingMore(first);
        assertNothingMore(second);
        List<String> received = new ArrayList<>(toFirst);
        received.addAll(toSecond);
        received.sort(null);
        List<String> expected = new ArrayList<>(sent);
        expected.sort(null);
        assertEquals(expected, received, "each message to exactly one consumer (first " + toFirst + ", second " + toSecond + ")");
        assertFalse(toFirst.isEmpty(), "the first consumer got none of " + sent);
        assertFalse(toSecond.isEmpty(), "the second consumer got none of " + sent);
    }

    /**
     * The prefetch of the consumers {@link #assertSplit} checks: each holds at most one message
     * it has not received, so of messages published while both are open, each gets one of the
     * first two.
     */
    static final String ONE_PREFETCHED = "&jms.prefetchPolicy.all=1";

    // --- a topic's declared subscriptions ------------------------------------------------------

    @Test
    void aMessagePublishedToATopicReachesEachSubscriptionReadAsAQueue() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-topic");
        session.createProducer(topic).send(session.createTextMessage("fanned-out"));
        assertEquals("fanned-out", receiveText(consumer(session, "subscription-topic/Subscriptions/first")));
        assertEquals("fanned-out", receiveText(consumer(session, "subscription-topic/Subscriptions/second")));
    }

    // --- plain topic consumers: unshared, non-durable, no name ---------------------------------

    @Test
    void aTopicConsumerReceivesWhatIsPublishedWhileItIsOpen() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-nondurable");
        MessageConsumer consumer = session.createConsumer(topic);
        session.createProducer(topic).send(session.createTextMessage("live"));
        assertEquals("live", receiveText(consumer));
    }

    @Test
    void twoTopicConsumersEachReceiveACopy() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-plain-copies");
        MessageConsumer first = session.createConsumer(topic);
        MessageConsumer second = session.createConsumer(topic);
        publish("subscription-plain-copies", "copied");
        assertEquals("copied", receiveText(first));
        assertEquals("copied", receiveText(second));
        assertNothingMore(first);
        assertNothingMore(second);
    }

    /**
     * A non-durable subscription exists only while it has a consumer: what is published before
     * the first consumer, or between one consumer's close and the next one's attach, is kept for
     * nobody. (Each consumer's first message is one published after it attached: anything kept
     * would have come first.)
     */
    @Test
    void whatIsPublishedWhileNoTopicConsumerIsOpenIsNotReceived() throws Exception {
        String topic = "subscription-plain-missed";
        publish(topic, "before any consumer");
        Session session = session();
        MessageConsumer first = session.createConsumer(session.createTopic(topic));
        publish(topic, "to the first");
        assertEquals("to the first", receiveText(first));
        first.close();

        publish(topic, "between the consumers");
        MessageConsumer second = session.createConsumer(session.createTopic(topic));
        publish(topic, "to the second");
        assertEquals("to the second", receiveText(second));
        assertNothingMore(second);
    }

    /**
     * A plain topic consumer is a Service Bus subscription the broker creates at its attach,
     * named by the broker ({@code <made-up>$$ND}: no subscription name, no client id), and
     * deletes when the consumer closes.
     */
    @Test
    void aTopicConsumerIsANonDurableSubscriptionDeletedWhenItCloses() throws Exception {
        String topic = "subscription-plain-lifetime";
        Session session = session();
        MessageConsumer consumer = session.createConsumer(session.createTopic(topic));
        List<String> names = subscriptions(topic);
        assertEquals(1, names.size(), () -> "one subscription for the consumer: " + names);
        assertTrue(names.get(0).endsWith("$$ND"), () -> "a non-durable subscription without client id: " + names);
        consumer.close();
        assertEventuallyNoSubscriptions(topic);
    }

    @Test
    void aTopicConsumersSubscriptionIsDeletedWithItsConnection() throws Exception {
        String topic = "subscription-plain-connection";
        Connection connection = connection();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        session.createConsumer(session.createTopic(topic));
        assertEquals(1, subscriptions(topic).size(), () -> "one subscription for the consumer");
        connection.close();
        assertEventuallyNoSubscriptions(topic);
    }

    /** noLocal "is currently unsupported and ignored" by Service Bus: a consumer gets its own connection's messages. */
    @Test
    void aNoLocalConsumerStillReceivesWhatItsOwnConnectionPublishes() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-nolocal");
        MessageConsumer consumer = session.createConsumer(topic, null, true);
        session.createProducer(topic).send(session.createTextMessage("own"));
        assertEquals("own", receiveText(consumer));
    }

    // --- shared non-durable subscriptions -------------------------------------------------------

    @Test
    void aSharedNonDurableConsumerReceivesWhatIsPublishedWhileItIsOpen() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-shared");
        MessageConsumer consumer = session.createSharedConsumer(topic, "live");
        session.createProducer(topic).send(session.createTextMessage("shared"));
        assertEquals("shared", receiveText(consumer));
    }

    /** Two connections without client id share subscription {@code split$$ND}: each message goes to one of them. */
    @Test
    void twoSharedNonDurableConsumersSplitTheMessages() throws Exception {
        String topic = "subscription-shared-split";
        Session one = connection(ONE_PREFETCHED).createSession(false, Session.AUTO_ACKNOWLEDGE);
        Session two = connection(ONE_PREFETCHED).createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer first = one.createSharedConsumer(one.createTopic(topic), "split");
        MessageConsumer second = two.createSharedConsumer(two.createTopic(topic), "split");
        assertEquals(List.of("split$$ND"), subscriptions(topic), "one subscription shared by both");
        List<String> sent = List.of("s-1", "s-2", "s-3", "s-4");
        publish(topic, sent.toArray(new String[0]));
        assertSplit(sent, first, second);
    }

    /**
     * A shared non-durable subscription lives while it has consumers: closing one of two keeps
     * it (the other still receives), closing the last deletes it, and a consumer of the same
     * name afterwards is on a new subscription that holds nothing published in between.
     */
    @Test
    void aSharedNonDurableSubscriptionIsDeletedWhenItsLastConsumerCloses() throws Exception {
        String topic = "subscription-shared-deleted";
        Session one = session();
        Session two = session();
        MessageConsumer first = one.createSharedConsumer(one.createTopic(topic), "gone");
        MessageConsumer second = two.createSharedConsumer(two.createTopic(topic), "gone");
        assertSubscriptionExists(topic, "gone$$ND");

        first.close();
        assertSubscriptionExists(topic, "gone$$ND");
        publish(topic, "to the one left");
        assertEquals("to the one left", receiveText(second));

        second.close();
        assertEventuallyNoSubscription(topic, "gone$$ND");
        publish(topic, "while deleted");
        MessageConsumer again = one.createSharedConsumer(one.createTopic(topic), "gone");
        publish(topic, "to the new one");
        assertEquals("to the new one", receiveText(again));
        assertNothingMore(again);
    }

    // --- shared durable subscriptions -----------------------------------------------------------

    /** Without a client id (Qpid JMS's {@code global} capability) the subscription is {@code kept$$D}. */
    @Test
    void aSharedDurableSubscriptionKeepsWhatIsPublishedWhileNoConsumerIsOpen() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-shared-durable");
        session.createSharedDurableConsumer(topic, "kept").close();
        assertSubscriptionExists("subscription-shared-durable", "kept$$D");
        session.createProducer(topic).send(session.createTextMessage("waiting"));
        MessageConsumer consumer = session.createSharedDurableConsumer(topic, "kept");
        assertEquals("waiting", receiveText(consumer));
        consumer.close();
        session.unsubscribe("kept");
    }

    @Test
    void aSharedDurableSubscriptionOfAClientIdKeepsWhatIsPublishedWhileNoConsumerIsOpen() throws Exception {
        Session session = clientConnection("shared-keeper").createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic topic = session.createTopic("subscription-shared-durable-client");
        session.createSharedDurableConsumer(topic, "kept").close();
        assertSubscriptionExists("subscription-shared-durable-client", "kept$shared-keeper$D");
        publish("subscription-shared-durable-client", "waiting");
        MessageConsumer consumer = session.createSharedDurableConsumer(topic, "kept");
        assertEquals("waiting", receiveText(consumer));
        consumer.close();
        session.unsubscribe("kept");
    }

    /** Two connections without client id share {@code split$$D}: each message goes to one of them. */
    @Test
    void twoSharedDurableConsumersWithoutClientIdSplitTheMessages() throws Exception {
        String topic = "subscription-shared-durable-split";
        Session one = connection(ONE_PREFETCHED).createSession(false, Session.AUTO_ACKNOWLEDGE);
        Session two = connection(ONE_PREFETCHED).createSession(false, Session.AUTO_ACKNOWLEDGE);
        assertSharedDurableSplit(topic, one, two, "split$$D");
    }

    /**
     * Two sessions of one connection with a client id share {@code split$split-client$D} (Qpid
     * JMS names the second link {@code split|2}).
     */
    @Test
    void twoSharedDurableConsumersOfAClientIdSplitTheMessages() throws Exception {
        String topic = "subscription-shared-durable-client-split";
        Connection connection = clientConnection("split-client", ONE_PREFETCHED);
        Session one = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Session two = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        assertSharedDurableSplit(topic, one, two, "split$split-client$D");
    }

    /**
     * Consumers of the shared durable subscription {@code split} in sessions {@code one} and
     * {@code two} are on the one Service Bus subscription {@code serviceBusName} and split what
     * is published; then it is unsubscribed.
     */
    private void assertSharedDurableSplit(String topic, Session one, Session two, String serviceBusName)
        throws Exception {
        MessageConsumer first = one.createSharedDurableConsumer(one.createTopic(topic), "split");
        MessageConsumer second = two.createSharedDurableConsumer(two.createTopic(topic), "split");
        assertEquals(List.of(serviceBusName), subscriptions(topic), "one subscription shared by both");
        List<String> sent = List.of(topic + "-1", topic + "-2", topic + "-3", topic + "-4");
        publish(topic, sent.toArray(new String[0]));
        assertSplit(sent, first, second);
        first.close();
        second.close();
        one.unsubscribe("split");
    }

    /**
     * {@code unsubscribe} deletes the subscription with what it holds: a consumer of the same
     * name afterwards is on a new, empty one.
     */
    @Test
    void unsubscribeDeletesASharedDurableSubscriptionWithoutClientId() throws Exception {
        assertUnsubscribeDeletes("subscription-shared-durable-unsubscribe", session(), "dropped$$D");
    }

    @Test
    void unsubscribeDeletesASharedDurableSubscriptionOfAClientId() throws Exception {
        Session session = clientConnection("dropping-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        assertUnsubscribeDeletes("subscription-shared-durable-client-unsubscribe", session, "dropped$dropping-client$D");
    }

    /**
     * {@code unsubscribe} of the shared durable subscription {@code dropped} in {@code session}
     * deletes the Service Bus subscription {@code serviceBusName} with the message it kept: a
     * consumer of the same name afterwards is on a new, empty one.
     */
    private void assertUnsubscribeDeletes(String topic, Session session, String serviceBusName) throws Exception {
        session.createSharedDurableConsumer(session.createTopic(topic), "dropped").close();
        publish(topic, "old");
        assertSubscriptionExists(topic, serviceBusName);
        session.unsubscribe("dropped");
        assertEventuallyNoSubscription(topic, serviceBusName);

        MessageConsumer consumer = session.createSharedDurableConsumer(session.createTopic(topic), "dropped");
        publish(topic, "new");
        assertEquals("new", receiveText(consumer));
        assertNothingMore(consumer);
        consumer.close();
        session.unsubscribe("dropped");
    }

    // --- unshared durable subscriptions (a client id is required) -------------------------------

    @Test
    @Tag("smoke")
    void aDurableSubscriptionOfAClientIdKeepsWhatIsPublishedUntilUnsubscribed() throws Exception {
        Session session = clientConnection("subscription-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic topic = session.createTopic("subscription-durable");
        session.createDurableConsumer(topic, "mine").close();
        assertSubscriptionExists("subscription-durable", "mine$subscription-client$D");
        session.createProducer(topic).send(session.createTextMessage("waiting"));
        MessageConsumer consumer = session.createDurableConsumer(topic, "mine");
        assertEquals("waiting", receiveText(consumer));
        consumer.close();
        session.unsubscribe("mine");
        assertEventuallyNoSubscription("subscription-durable", "mine$subscription-client$D");
    }

    /**
     * "Unshared subscriptions permit only a single consumer": a second consumer, from another
     * connection with the same client id, is refused with a JMSException, and the first keeps
     * the subscription.
     */
    @Test
    void aSecondConsumerOfAnUnsharedDurableSubscriptionIsRefused() throws Exception {
        String topic = "subscription-durable-second";
        Session holder = clientConnection("single-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer first = holder.createDurableConsumer(holder.createTopic(topic), "only");

        Session other = clientConnection("single-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        thrown(JMSException.class, () -> other.createDurableConsumer(other.createTopic(topic), "only"));

        publish(topic, "still the first's");
        assertEquals("still the first's", receiveText(first));
        first.close();
        holder.unsubscribe("only");
    }

    /**
     * Unsubscribing a durable subscription that has an active consumer (on another connection
     * with the same client id) is a JMSException, not the InvalidDestinationException of an
     * unknown name, and the subscription and its consumer carry on.
     */
    @Test
    void unsubscribeOfAnActiveDurableSubscriptionIsRefused() throws Exception {
        String topic = "subscription-durable-active";
        Session holder = clientConnection("busy-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = holder.createDurableConsumer(holder.createTopic(topic), "busy");

        Session other = clientConnection("busy-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        JMSException refused = thrown(JMSException.class, () -> other.unsubscribe("busy"));
        assertFalse(refused instanceof InvalidDestinationException,
            () -> "an active subscription is not an unknown one: " + refused);

        assertSubscriptionExists(topic, "busy$busy-client$D");
        publish(topic, "still subscribed");
        assertEquals("still subscribed", receiveText(consumer));
        consumer.close();
        holder.unsubscribe("busy");
    }

    @Test
    void unsubscribeOfAnUnknownSubscriptionIsAnInvalidDestination() throws Exception {
        Session session = clientConnection("unknown-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        thrown(InvalidDestinationException.class, () -> session.unsubscribe("never-subscribed"));
    }

    // --- selectors ------------------------------------------------------------------------------

    /**
     * A durable consumer's selector filters what it receives: of what is published while it is
     * closed, it gets only the matching message.
     */
    @Test
    @Tag("smoke")
    void aDurableSubscriptionWithASelectorDeliversOnlyMatchingMessages() throws Exception {
        String topic = "subscription-selector";
        Session session = clientConnection("selector-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        session.createDurableConsumer(session.createTopic(topic), "picky", "color = 'red'", false).close();
        publishColored(topic, "blue-1", "blue");
        publishColored(topic, "red-1", "red");
        publishColored(topic, "blue-2", "blue");
        MessageConsumer consumer = session.createDurableConsumer(session.createTopic(topic), "picky", "color = 'red'", false);
        assertEquals("red-1", receiveText(consumer));
        assertNothingMore(consumer);
        consumer.close();
        session.unsubscribe("picky");
    }

    /**
     * The selector is the subscription's rule, applied when the topic routes a message: what does
     * not match never reaches the subscription (browsed as the queue
     * {@code <topic>/Subscriptions/<name>}), rather than being skipped at delivery.
     */
    @Test
    void aSelectorIsTheSubscriptionsRule() throws Exception {
        String topic = "subscription-selector-rule";
        Session session = clientConnection("rule-client").createSession(false, Session.AUTO_ACKNOWLEDGE);
        session.createDurableConsumer(session.createTopic(topic), "filtered", "color = 'red'", false).close();
        publishColored(topic, "blue-1", "blue");
        publishColored(topic, "red-1", "red");
        assertEquals(List.of("red-1"), browse(topic + "/Subscriptions/filtered$rule-client$D"));
        session.unsubscribe("filtered");
    }
}
