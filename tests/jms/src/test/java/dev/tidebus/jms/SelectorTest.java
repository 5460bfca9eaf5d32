package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.JMSException;
import jakarta.jms.MessageConsumer;
import jakarta.jms.QueueBrowser;
import jakarta.jms.Session;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * JMS message selectors are not applied yet: the broker refuses a receiver that asks for one
 * (amqp:not-implemented, naming the selector) rather than ignore it and deliver what the
 * client filtered out (as it did before 6f57936).
 */
class SelectorTest extends JmsTest {
    private static final String SELECTOR = "color = 'red' AND JMSPriority >= 0";

    @Test
    @Tag("smoke")
    void aConsumerWithASelectorIsRefusedNamingTheSelector() throws Exception {
        Session session = session();
        JMSException refused = thrown(JMSException.class,
            () -> session.createConsumer(session.createQueue("selector-consumer"), SELECTOR));
        assertTrue(refused.getMessage().contains(SELECTOR), refused.getMessage());
        assertTrue(refused.getMessage().contains("not supported"), refused.getMessage());
    }

    @Test
    void aRefusedSelectorConsumerTakesNothingFromTheQueue() throws Exception {
        send("selector-untouched", "blue", "red");
        Session session = session();
        thrown(JMSException.class, () -> {
            MessageConsumer selective = session.createConsumer(session.createQueue("selector-untouched"), SELECTOR);
            selective.receive(WAIT_MS);
        });
        MessageConsumer plain = consumer(session(), "selector-untouched");
        assertEquals(List.of("blue", "red"), List.of(receiveText(plain), receiveText(plain)));
    }

    @Test
    void aBrowserWithASelectorIsRefusedNamingTheSelector() throws Exception {
        send("selector-browser", "red");
        Session session = session();
        JMSException refused = thrown(JMSException.class, () -> {
            QueueBrowser browser = session.createBrowser(session.createQueue("selector-browser"), SELECTOR);
            browser.getEnumeration().hasMoreElements();
        });
        assertTrue(refused.getMessage().contains(SELECTOR), refused.getMessage());
        assertEquals(List.of("red"), browse("selector-browser"), "the queue is untouched");
    }
}
