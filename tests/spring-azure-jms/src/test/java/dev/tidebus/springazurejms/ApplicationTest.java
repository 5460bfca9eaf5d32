package dev.tidebus.springazurejms;

import static org.awaitility.Awaitility.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.servicebus.jms.ServiceBusJmsConnectionFactory;
import jakarta.jms.ConnectionFactory;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.jms.config.JmsListenerEndpointRegistry;
import org.springframework.jms.listener.DefaultMessageListenerContainer;

/**
 * The application against the real broker (tests/broker/spring_azure_jms.rs starts it and sets
 * TIDEBUS_CONNECTION_STRING). Every wait has a deadline of {@link #DEADLINE}: a send that never
 * completes (azure-servicebus-jms reconnects forever by default), a subscription that is never
 * made or a listener that never gets its message fails the test instead of hanging it.
 */
@SpringBootTest
class ApplicationTest {
    /** How long a send, a listener's subscription or a message's delivery may take. */
    private static final Duration DEADLINE = Duration.ofSeconds(30);

    @Autowired
    ConnectionFactory connectionFactory;

    @Autowired
    JmsListenerEndpointRegistry listeners;

    @Autowired
    Orders orders;

    @Autowired
    Events events;

    /**
     * The starter's ConnectionFactory for the premium tier: azure-servicebus-jms's, dialing TLS
     * to the connection string's host (so on 5671: a port in the string would be dropped).
     */
    @Test
    void theStarterDialsTheBrokerWithAzureServiceBusJms() {
        String connectionString = System.getenv("TIDEBUS_CONNECTION_STRING");
        assertNotNull(connectionString,
            "TIDEBUS_CONNECTION_STRING is not set: run this through `cargo test` (tests/broker/spring_azure_jms.rs)");
        // The starter's bean itself (neither cached nor pooled unless spring.jms.cache.* or
        // spring.jms.servicebus.pool.* say so): each JmsTemplate send opens a connection.
        ServiceBusJmsConnectionFactory factory = assertInstanceOf(ServiceBusJmsConnectionFactory.class, connectionFactory);
        String host = connectionString.replaceFirst("^Endpoint=sb://([^/;]*)/?;.*$", "$1");
        String uri = factory.getRemoteConnectionUri();
        System.out.println("the starter's azure-servicebus-jms dials " + uri);
        // amqps://HOST with no port, inside the failover: wrapper of the library's default
        // reconnects: failover:(amqps://127.0.0.X)?jms.prefetchPolicy.all=0
        assertTrue(uri.matches("(failover:\\()?amqps://" + Pattern.quote(host) + "[)?].*"), uri);
        assertTrue(listeners.isRunning(), "Spring did not start the listener containers");
    }

    @Test
    void anOrderSentWithJmsTemplateReachesTheListener() throws Exception {
        String order = "order " + UUID.randomUUID();
        assertTimeoutPreemptively(DEADLINE, () -> orders.place(order), "JmsTemplate did not send the order");
        assertEquals(order, orders.received().poll(DEADLINE.toSeconds(), TimeUnit.SECONDS),
            "the @JmsListener did not receive the order within " + DEADLINE);
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
        assertTrue(container.isSubscriptionDurable() && container.isSubscriptionShared(),
            "the starter's topic listener container is not a shared durable subscriber");
        await("the topic listener's consumer on its subscription").atMost(DEADLINE)
            .until(container::isRegisteredWithDestination);
        String event = "event " + UUID.randomUUID();
        assertTimeoutPreemptively(DEADLINE, () -> events.publish(event), "JmsTemplate did not publish the event");
        assertEquals(event, events.received().poll(DEADLINE.toSeconds(), TimeUnit.SECONDS),
            "the topic's @JmsListener did not receive the event within " + DEADLINE);
    }
}
