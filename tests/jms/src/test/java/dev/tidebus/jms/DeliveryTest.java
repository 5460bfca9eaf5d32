package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.DeliveryMode;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * How a producer's delivery options reach the consumer: the delivery mode, the time to live,
 * and the delivery delay (not yet).
 */
class DeliveryTest extends JmsTest {
    @Test
    void aNonPersistentMessageArrivesMarkedNonPersistent() throws Exception {
        Session session = session();
        MessageProducer producer = session.createProducer(session.createQueue("delivery-nonpersistent"));
        producer.setDeliveryMode(DeliveryMode.NON_PERSISTENT);
        producer.send(session.createTextMessage("fleeting"));
        Message got = receive(consumer(session, "delivery-nonpersistent"));
        assertEquals("fleeting", text(got));
        assertEquals(DeliveryMode.NON_PERSISTENT, got.getJMSDeliveryMode());
    }

    /**
     * The broker counts the time to live from when it enqueued the message, which is before the
     * (synchronous, persistent) send returned: once the clock is past the return plus the TTL,
     * the message has expired, and a marker sent then is the first thing a consumer gets
     * (queues are FIFO), however slowly the test runs.
     */
    @Test
    void aMessagePastItsTimeToLiveIsNotDelivered() throws Exception {
        Session session = session();
        MessageProducer producer = session.createProducer(session.createQueue("delivery-ttl"));
        producer.setTimeToLive(100);
        producer.send(session.createTextMessage("expiring"));
        long expired = System.currentTimeMillis() + 100 + 10;
        eventually(Duration.ofSeconds(5), () -> "the clock to pass " + expired,
            () -> System.currentTimeMillis() > expired);
        producer.setTimeToLive(Message.DEFAULT_TIME_TO_LIVE);
        producer.send(session.createTextMessage("marker"));

        MessageConsumer consumer = consumer(session, "delivery-ttl");
        assertEquals("marker", receiveText(consumer), "the expired message was delivered before the marker");
    }

    @Test
    void aMessageWithinItsTimeToLiveIsDeliveredWithItsExpiration() throws Exception {
        Session session = session();
        MessageProducer producer = session.createProducer(session.createQueue("delivery-ttl-long"));
        producer.setTimeToLive(120_000);
        long before = System.currentTimeMillis();
        producer.send(session.createTextMessage("lasting"));
        long after = System.currentTimeMillis();
        Message got = receive(consumer(session, "delivery-ttl-long"));
        assertEquals("lasting", text(got));
        long expiration = got.getJMSExpiration();
        assertTrue(expiration >= before + 120_000 && expiration <= after + 120_000,
            "JMSExpiration " + expiration + " is the send time (" + before + ".." + after + ") plus the TTL");
    }

    /**
     * Service Bus Premium takes a JMS delivery delay as a scheduled enqueue time. Qpid JMS sends
     * one only to a broker that offers the DELAYED_DELIVERY connection capability.
     */
    @Test
    void aDelayedMessageArrivesAfterAMarkerSentWithoutDelay() throws Exception {
        Session session = session();
        MessageProducer producer = session.createProducer(session.createQueue("delivery-delay"));
        producer.setDeliveryDelay(2_000);
        long before = System.currentTimeMillis();
        producer.send(session.createTextMessage("delayed"));
        producer.setDeliveryDelay(0);
        producer.send(session.createTextMessage("marker"));

        MessageConsumer consumer = consumer(session, "delivery-delay");
        assertEquals("marker", receiveText(consumer));
        Message delayed = receive(consumer);
        assertEquals("delayed", text(delayed));
        assertTrue(delayed.getJMSDeliveryTime() >= before + 2_000, "JMSDeliveryTime " + delayed.getJMSDeliveryTime());
        assertTrue(System.currentTimeMillis() >= before + 2_000, "delivered before its delivery time");
    }
}
