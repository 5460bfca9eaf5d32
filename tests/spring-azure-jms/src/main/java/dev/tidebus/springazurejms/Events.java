package dev.tidebus.springazurejms;

import jakarta.jms.ConnectionFactory;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import org.springframework.jms.annotation.JmsListener;
import org.springframework.jms.core.JmsTemplate;
import org.springframework.stereotype.Service;

/**
 * Publishes events on the topic {@code events} with a publish-subscribe JmsTemplate and keeps
 * each event its listener receives through the subscription {@code audit}. The listener is on
 * the starter's {@code topicJmsListenerContainerFactory}, which application.properties makes
 * durable and shared (spring.jms.servicebus.listener.*), on connections with the client id
 * spring.jms.servicebus.topic-client-id: the broker makes it the Service Bus subscription
 * {@code audit$tidebus-spring-app$D}.
 */
@Service
public class Events {
    public static final String TOPIC = "events";
    public static final String SUBSCRIPTION = "audit";
    /** The listener's id, by which the test finds its container. */
    public static final String LISTENER = "audit-listener";

    private final JmsTemplate template;
    private final BlockingQueue<String> received = new LinkedBlockingQueue<>();

    public Events(ConnectionFactory connectionFactory) {
        template = new JmsTemplate(connectionFactory);
        template.setPubSubDomain(true);
    }

    public void publish(String event) {
        template.convertAndSend(TOPIC, event);
    }

    /** What the listener received, in order. */
    public BlockingQueue<String> received() {
        return received;
    }

    @JmsListener(id = LISTENER, destination = TOPIC, subscription = SUBSCRIPTION,
        containerFactory = "topicJmsListenerContainerFactory")
    void onEvent(String event) {
        received.add(event);
    }
}
