package dev.tidebus.springjms;

import static org.awaitility.Awaitility.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.Message;
import jakarta.jms.TextMessage;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.jms.config.JmsListenerEndpointRegistry;
import org.springframework.jms.core.JmsTemplate;
import org.springframework.jms.listener.DefaultMessageListenerContainer;

/**
 * The application against the real broker (tests/broker/spring_jms.rs starts it and sets
 * TIDEBUS_AMQP_URL). Every wait has a deadline: a listener that never gets its message fails
 * the test after {@link #DEADLINE_S} seconds instead of hanging it.
 */
@SpringBootTest(properties = "spring.jms.template.receive-timeout=30s")
class ApplicationTest {
    /** How long a sent message may take to reach its listener, or a reply to come back. */
    private static final long DEADLINE_S = 30;

    @Autowired
    Orders orders;

    @Autowired
    JmsTemplate template;

    @Autowired
    JmsListenerEndpointRegistry listeners;

    @Autowired
    Events events;

    @Test
    void anOrderSentWithJmsTemplateReachesTheListener() throws Exception {
        assertNotNull(System.getenv("TIDEBUS_AMQP_URL"),
            "TIDEBUS_AMQP_URL is not set: run this through `cargo test` (tests/broker/spring_jms.rs)");
        assertTrue(listeners.isRunning(), "Spring did not start the listener containers");
        String order = "order " + UUID.randomUUID();
        orders.place(order);
        assertEquals(order, orders.received().poll(DEADLINE_S, TimeUnit.SECONDS),
            "the @JmsListener did not receive the order within " + DEADLINE_S + " s");
    }

    /**
     * A shared durable subscription's listener gets what the topic template publishes. The event
     * is published once the listener's consumer is on the subscription: a topic keeps nothing
     * for a subscription that does not exist yet.
     */
    @Test
    void anEventPublishedOnATopicReachesItsSubscriptionsListener() throws Exception {
        DefaultMessageListenerContainer container = assertInstanceOf(DefaultMessageListenerContainer.class,
            listeners.getListenerContainer(Events.LISTENER));
        await("the topic listener's consumer on its subscription").atMost(Duration.ofSeconds(DEADLINE_S))
            .until(container::isRegisteredWithDestination);
        String event = "event " + UUID.randomUUID();
        events.publish(event);
        assertEquals(event, events.received().poll(DEADLINE_S, TimeUnit.SECONDS),
            "the topic's @JmsListener did not receive the event within " + DEADLINE_S + " s");
    }

    @Test
    void aRequestIsAnsweredOnItsReplyToQueue() throws Exception {
        String request = "ping " + UUID.randomUUID();
        AtomicReference<Message> sent = new AtomicReference<>();
        template.send(Requests.QUEUE, session -> {
            TextMessage message = session.createTextMessage(request);
            message.setJMSReplyTo(session.createQueue("replies"));
            sent.set(message);
            return message;
        });
        // JmsTemplate's receive waits spring.jms.template.receive-timeout (30 s) at most.
        Message reply = template.receive("replies");
        assertNotNull(reply, "no reply on the queue replies within " + DEADLINE_S + " s");
        assertEquals("reply to " + request, assertInstanceOf(TextMessage.class, reply).getText());
        assertEquals(sent.get().getJMSMessageID(), reply.getJMSCorrelationID(),
            "Spring correlates the reply with the request's JMSMessageID");
    }
}
