package dev.tidebus.springazurejms;

import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import org.springframework.jms.annotation.JmsListener;
import org.springframework.jms.core.JmsTemplate;
import org.springframework.stereotype.Service;

/**
 * Places orders on the queue {@code orders} with the auto-configured JmsTemplate and keeps each
 * order its listener (on the starter's default container factory) receives.
 */
@Service
public class Orders {
    public static final String QUEUE = "orders";

    private final JmsTemplate template;
    private final BlockingQueue<String> received = new LinkedBlockingQueue<>();

    public Orders(JmsTemplate template) {
        this.template = template;
    }

    public void place(String order) {
        template.convertAndSend(QUEUE, order);
    }

    /** What the listener received, in order. */
    public BlockingQueue<String> received() {
        return received;
    }

    @JmsListener(destination = QUEUE)
    void onOrder(String order) {
        received.add(order);
    }
}
