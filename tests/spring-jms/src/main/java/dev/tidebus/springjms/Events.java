package dev.tidebus.springjms;

import jakarta.jms.ConnectionFactory;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import org.springframework.jms.annotation.JmsListener;
import org.springframework.jms.core.JmsTemplate;
import org.springframework.stereotype.Service;

/**
 * Publishes events on the topic {@code events} with a publish-subscribe JmsTemplate and keeps
 * each event its listener receives through the shared durable subscription {@code audit}
 * (the listener container factory {@code topicListenerFactory} in {@link Application}), which
 * the broker makes the Service Bus subscription {@code audit$$D} (no client id).
 */
@Service
public class Events {
    public static final String TOPIC = "events";
    public static final String SUBSCRIPTION = "audit";
    /** The listener's id in Spring's JmsListenerEndpointRegistry. */
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
        containerFactory = "topicListenerFactory")
    void onEvent(String event) {
        received.add(event);
    }
}
