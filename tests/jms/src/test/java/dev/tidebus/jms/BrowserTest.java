package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;

import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.Session;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * QueueBrowser: Qpid JMS attaches a receiver whose source asks for distribution-mode copy, and
 * the broker answers with pre-settled copies in sequence order, as a Service Bus peek shows the
 * queue, taking and locking nothing (before 6f57936 it took every message it showed).
 */
class BrowserTest extends JmsTest {
    @Test
    @Tag("smoke")
    void aBrowserShowsEveryMessageInOrderAndTakesNone() throws Exception {
        List<String> texts = List.of("browse-0", "browse-1", "browse-2");
        send("browse-all", texts.toArray(new String[0]));
        assertEquals(texts, browse("browse-all"));
        assertEquals(texts, browse("browse-all"), "a second browse");

        MessageConsumer consumer = consumer(session(), "browse-all");
        List<String> received = new ArrayList<>();
        for (int i = 0; i < texts.size(); i++) {
            Message got = receive(consumer);
            assertDeliveryCount(1, got);
            received.add(text(got));
        }
        assertEquals(texts, received, "what a consumer gets after the browses");
    }

    @Test
    void aBrowserShowsAMessageAnotherConsumerHoldsLocked() throws Exception {
        send("browse-locked", "held");
        Message held = receive(consumer(session(Session.CLIENT_ACKNOWLEDGE), "browse-locked"));
        assertEquals(List.of("held"), browse("browse-locked"));
        held.acknowledge();
        assertEventuallyEmpty("browse-locked");
    }

    @Test
    void aBrowserOfAnEmptyQueueShowsNothing() throws Exception {
        assertEquals(List.of(), browse("browse-empty"));
    }
}
