package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import jakarta.jms.Connection;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.QueueBrowser;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * JMS message selectors on queue consumers and browsers (issue 55): the broker hands a consumer
 * (shows a browser) only the messages its selector selects, and leaves the others, in order, to
 * everyone else. Before, it refused such a receiver (amqp:not-implemented).
 */
class SelectorTest extends JmsTest {
    private static final String SELECTOR = "color = 'red' AND JMSPriority >= 0";
    /** How long a consumer waits to show that nothing more matches. */
    private static final long NOTHING_MS = 500;

    /** Sends text messages {@code texts}, each with property {@code color} from {@code colors}. */
    static void sendColored(String queue, String[] texts, String... colors) throws JMSException {
        try (Connection connection = factory("").createConnection()) {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer producer = session.createProducer(session.createQueue(queue));
            for (int i = 0; i < texts.length; i++) {
                TextMessage message = session.createTextMessage(texts[i]);
                message.setStringProperty("color", colors[i]);
                producer.send(message);
            }
        }
    }

    @Test
    @Tag("smoke")
    void aConsumerWithASelectorGetsOnlyMatchesAndLeavesTheRestInOrder() throws Exception {
        String[] texts = {"blue", "red 1", "green", "red 2"};
        sendColored("selector-consumer", texts, "blue", "red", "green", "red");
        Session session = session();
        Queue queue = session.createQueue("selector-consumer");
        MessageConsumer reds = session.createConsumer(queue, SELECTOR);
        assertEquals(List.of("red 1", "red 2"), List.of(receiveText(reds), receiveText(reds)));
        assertNull(reds.receive(NOTHING_MS), "nothing else matches");
        MessageConsumer plain = consumer(session(), "selector-consumer");
        assertEquals(List.of("blue", "green"), List.of(receiveText(plain), receiveText(plain)));
        plain.close(); // else its prefetch competes for the next message
        sendColored("selector-consumer", new String[] {"red 3"}, "red");
        assertEquals("red 3", receiveText(reds), "a later match arrives");
    }

    @Test
    void aBrowserWithASelectorShowsOnlyMatchesAndTakesNothing() throws Exception {
        sendColored("selector-browser", new String[] {"red 1", "blue", "red 2"}, "red", "blue", "red");
        Session session = session();
        List<String> shown = new ArrayList<>();
        try (QueueBrowser browser = session.createBrowser(session.createQueue("selector-browser"), SELECTOR)) {
            for (Object message : Collections.list(browser.getEnumeration())) {
                shown.add(text((Message) message));
            }
        }
        assertEquals(List.of("red 1", "red 2"), shown);
        assertEquals(List.of("red 1", "blue", "red 2"), browse("selector-browser"), "the queue is untouched");
    }

    @Test
    void aRequesterReceivesItsReplyByCorrelationId() throws Exception {
        Session session = session();
        Queue replies = session.createQueue("selector-replies");
        MessageProducer responder = session.createProducer(replies);
        List<String> ids = new ArrayList<>();
        for (String text : List.of("reply a", "reply b", "reply c")) {
            TextMessage reply = session.createTextMessage(text);
            String id = "ID:" + java.util.UUID.randomUUID();
            reply.setJMSCorrelationID(id);
            responder.send(reply);
            ids.add(id);
        }
        MessageConsumer mine = session.createConsumer(replies, "JMSCorrelationID = '" + ids.get(1) + "'");
        Message reply = receive(mine);
        assertEquals("reply b", text(reply));
        assertEquals(ids.get(1), reply.getJMSCorrelationID());
        assertNull(mine.receive(NOTHING_MS), "only its own reply");
        MessageConsumer others = consumer(session(), "selector-replies");
        assertEquals(List.of("reply a", "reply c"), List.of(receiveText(others), receiveText(others)));
    }
}
