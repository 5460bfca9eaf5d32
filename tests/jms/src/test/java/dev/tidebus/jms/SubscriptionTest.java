package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;

import jakarta.jms.Connection;
import jakarta.jms.MessageConsumer;
import jakarta.jms.Session;
import jakarta.jms.Topic;
import org.junit.jupiter.api.Disabled;
import org.junit.jupiter.api.Test;

/**
 * Topics: what a JMS producer publishes reaches the topic's subscriptions. A JMS consumer on a
 * topic (the four kinds of JMS subscription, which Service Bus Premium creates on attach) is
 * not supported yet: the broker refuses a receiver on a topic (amqp:not-allowed); today a
 * subscription declared in the config is read as a queue named
 * {@code <topic>/Subscriptions/<subscription>}.
 */
class SubscriptionTest extends JmsTest {
    private static final String NOT_YET = "JMS topic consumers are not supported yet: the broker refuses a "
        + "receiver on a topic (amqp:not-allowed) (issue 55)";

    @Test
    void aMessagePublishedToATopicReachesEachSubscriptionReadAsAQueue() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-topic");
        session.createProducer(topic).send(session.createTextMessage("fanned-out"));
        assertEquals("fanned-out", receiveText(consumer(session, "subscription-topic/Subscriptions/first")));
        assertEquals("fanned-out", receiveText(consumer(session, "subscription-topic/Subscriptions/second")));
    }

    @Test
    @Disabled(NOT_YET)
    void aTopicConsumerReceivesWhatIsPublishedWhileItIsOpen() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-nondurable");
        MessageConsumer consumer = session.createConsumer(topic);
        session.createProducer(topic).send(session.createTextMessage("live"));
        assertEquals("live", receiveText(consumer));
    }

    @Test
    @Disabled(NOT_YET)
    void aSharedDurableSubscriptionKeepsWhatIsPublishedWhileNoConsumerIsOpen() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-shared-durable");
        session.createSharedDurableConsumer(topic, "kept").close();
        session.createProducer(topic).send(session.createTextMessage("waiting"));
        MessageConsumer consumer = session.createSharedDurableConsumer(topic, "kept");
        assertEquals("waiting", receiveText(consumer));
        consumer.close();
        session.unsubscribe("kept");
    }

    @Test
    @Disabled(NOT_YET)
    void aDurableSubscriptionOfAClientIdKeepsWhatIsPublishedUntilUnsubscribed() throws Exception {
        Connection connection = closing(factory("").createConnection());
        connection.setClientID("subscription-client");
        connection.start();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Topic topic = session.createTopic("subscription-durable");
        session.createDurableConsumer(topic, "mine").close();
        session.createProducer(topic).send(session.createTextMessage("waiting"));
        MessageConsumer consumer = session.createDurableConsumer(topic, "mine");
        assertEquals("waiting", receiveText(consumer));
        consumer.close();
        session.unsubscribe("mine");
    }

    @Test
    @Disabled(NOT_YET)
    void aSharedNonDurableConsumerReceivesWhatIsPublishedWhileItIsOpen() throws Exception {
        Session session = session();
        Topic topic = session.createTopic("subscription-shared");
        MessageConsumer consumer = session.createSharedConsumer(topic, "live");
        session.createProducer(topic).send(session.createTextMessage("shared"));
        assertEquals("shared", receiveText(consumer));
    }
}
