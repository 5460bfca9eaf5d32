package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.JMSContext;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Producers and consumers on a queue: a message's JMS headers and properties as sent, order,
 * the anonymous producer, asynchronous listeners, the simplified API, request and reply, and a
 * consumer without prefetch (as azure-servicebus-jms configures Qpid JMS).
 */
class QueueTest extends JmsTest {
    @Test
    @Tag("smoke")
    void aMessageArrivesWithTheHeadersAndPropertiesItWasSentWith() throws Exception {
        Session session = session();
        Queue queue = session.createQueue("queue-headers");
        Queue replies = session.createQueue("queue-headers-replies");
        TextMessage sent = session.createTextMessage("hello");
        sent.setJMSCorrelationID("corr-1");
        sent.setJMSType("type-1");
        sent.setJMSReplyTo(replies);
        sent.setStringProperty("color", "red");
        sent.setIntProperty("count", 7);
        sent.setLongProperty("big", 1L << 40);
        sent.setBooleanProperty("flag", true);
        sent.setDoubleProperty("ratio", 1.5);
        long before = System.currentTimeMillis();
        session.createProducer(queue).send(sent, DeliveryMode.PERSISTENT, 7, 60_000);
        long after = System.currentTimeMillis();

        Message got = receive(session.createConsumer(queue));
        assertEquals("hello", text(got));
        assertEquals(sent.getJMSMessageID(), got.getJMSMessageID());
        assertTrue(got.getJMSMessageID().startsWith("ID:"), got.getJMSMessageID());
        assertEquals("corr-1", got.getJMSCorrelationID());
        assertEquals("type-1", got.getJMSType());
        assertEquals(7, got.getJMSPriority());
        assertEquals(DeliveryMode.PERSISTENT, got.getJMSDeliveryMode());
        assertEquals(sent.getJMSTimestamp(), got.getJMSTimestamp());
        assertEquals(queue, got.getJMSDestination());
        assertEquals(replies, got.getJMSReplyTo());
        long expiration = got.getJMSExpiration();
        assertTrue(expiration >= before + 60_000 && expiration <= after + 60_000,
            "JMSExpiration " + expiration + " is the send time (" + before + ".." + after + ") plus the 60 s TTL");
        assertDeliveryCount(1, got);

        assertEquals("red", got.getStringProperty("color"));
        assertEquals(7, got.getObjectProperty("count"));
        assertEquals(1L << 40, got.getObjectProperty("big"));
        assertEquals(true, got.getObjectProperty("flag"));
        assertEquals(1.5, got.getObjectProperty("ratio"));
    }

    @Test
    void messagesArriveInTheOrderTheyWereSent() throws Exception {
        List<String> texts = List.of("order-0", "order-1", "order-2", "order-3", "order-4");
        send("queue-order", texts.toArray(new String[0]));
        MessageConsumer consumer = consumer(session(), "queue-order");
        List<String> got = new ArrayList<>();
        for (int i = 0; i < texts.size(); i++) {
            got.add(receiveText(consumer));
        }
        assertEquals(texts, got);
    }

    @Test
    void aProducerWithoutADestinationSendsToTheQueueEachSendNames() throws Exception {
        Session session = session();
        MessageProducer producer = session.createProducer(null);
        producer.send(session.createQueue("queue-anonymous-a"), session.createTextMessage("to-a"));
        producer.send(session.createQueue("queue-anonymous-b"), session.createTextMessage("to-b"));
        assertEquals("to-a", receiveText(consumer(session, "queue-anonymous-a")));
        assertEquals("to-b", receiveText(consumer(session, "queue-anonymous-b")));
    }

    @Test
    void aMessageListenerReceivesWhatIsSentAfterItIsSet() throws Exception {
        Session session = session();
        CompletableFuture<String> got = new CompletableFuture<>();
        consumer(session, "queue-listener").setMessageListener(message -> {
            try {
                got.complete(text(message));
            } catch (Throwable e) {
                got.completeExceptionally(e);
            }
        });
        send("queue-listener", "heard");
        assertEquals("heard", got.get(WAIT_MS, TimeUnit.MILLISECONDS));
    }

    @Test
    void theSimplifiedApiSendsAndReceivesABody() throws Exception {
        try (JMSContext context = factory("").createContext()) {
            Queue queue = context.createQueue("queue-context");
            context.createProducer().setProperty("via", "context").send(queue, "simple");
            Message got = context.createConsumer(queue).receive(WAIT_MS);
            assertNotNull(got, "nothing received");
            assertEquals("simple", got.getBody(String.class));
            assertEquals("context", got.getStringProperty("via"));
        }
    }

    @Test
    void aReplyGoesToTheQueueTheRequestNamesInJmsReplyTo() throws Exception {
        Session requester = session();
        Queue replies = requester.createQueue("queue-replies");
        TextMessage request = requester.createTextMessage("ping");
        request.setJMSReplyTo(replies);
        requester.createProducer(requester.createQueue("queue-requests")).send(request);

        Session responder = session();
        Message got = receive(consumer(responder, "queue-requests"));
        TextMessage reply = responder.createTextMessage("pong");
        reply.setJMSCorrelationID(got.getJMSMessageID());
        responder.createProducer(null).send(got.getJMSReplyTo(), reply);

        Message answer = receive(requester.createConsumer(replies));
        assertEquals("pong", text(answer));
        assertEquals(request.getJMSMessageID(), answer.getJMSCorrelationID());
    }

    @Test
    void withoutPrefetchAReceiveOnAnEmptyQueueReturnsNothingAndTheNextReceiveGetsWhatWasSent() throws Exception {
        Connection connection = connection("&jms.prefetchPolicy.all=0");
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = consumer(session, "queue-prefetch0");
        assertNull(consumer.receiveNoWait(), "receiveNoWait on an empty queue");
        send("queue-prefetch0", "pulled");
        assertEquals("pulled", receiveText(consumer));
        assertNull(consumer.receiveNoWait(), "receiveNoWait once the queue is empty again");
    }
}
