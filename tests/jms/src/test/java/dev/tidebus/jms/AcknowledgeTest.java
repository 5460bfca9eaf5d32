package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;

import jakarta.jms.Connection;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.Session;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The session acknowledge modes on a queue (each receive is a peek-lock; an acknowledge
 * completes), Session.recover(), and the broker's redelivery of a message a closed session
 * left unacknowledged. "Still on the queue" and "gone" are what a QueueBrowser shows: a browse
 * is a peek, locked messages included.
 */
class AcknowledgeTest extends JmsTest {
    @Test
    void autoAcknowledgeTakesEachMessageOffTheQueueAsItIsReceived() throws Exception {
        send("ack-auto", "auto");
        assertEquals("auto", receiveText(consumer(session(Session.AUTO_ACKNOWLEDGE), "ack-auto")));
        assertEventuallyEmpty("ack-auto");
    }

    @Test
    void clientAcknowledgeKeepsMessagesUntilOneAcknowledgeTakesAllTheSessionReceived() throws Exception {
        send("ack-client", "client-0", "client-1");
        MessageConsumer consumer = consumer(session(Session.CLIENT_ACKNOWLEDGE), "ack-client");
        Message first = receive(consumer);
        Message second = receive(consumer);
        assertEquals(List.of("client-0", "client-1"), List.of(text(first), text(second)));
        assertEquals(List.of("client-0", "client-1"), browse("ack-client"), "unacknowledged, still on the queue");

        first.acknowledge();
        assertEventuallyEmpty("ack-client");
    }

    @Test
    void dupsOkAcknowledgeTakesTheMessageOffTheQueue() throws Exception {
        send("ack-dupsok", "lazy");
        assertEquals("lazy", receiveText(consumer(session(Session.DUPS_OK_ACKNOWLEDGE), "ack-dupsok")));
        assertEventuallyEmpty("ack-dupsok");
    }

    @Test
    void recoverRedeliversTheUnacknowledgedMessageMarkedRedelivered() throws Exception {
        send("ack-recover", "again");
        Session session = session(Session.CLIENT_ACKNOWLEDGE);
        MessageConsumer consumer = consumer(session, "ack-recover");
        Message first = receive(consumer);
        assertDeliveryCount(1, first);

        session.recover();
        Message second = receive(consumer);
        assertEquals("again", text(second));
        assertEquals(first.getJMSMessageID(), second.getJMSMessageID());
        assertDeliveryCount(2, second);

        second.acknowledge();
        assertEventuallyEmpty("ack-recover");
    }

    /**
     * Without prefetch (as azure-servicebus-jms sets Qpid JMS up), a session closed with a
     * message unacknowledged gives it back (modified, delivery failed): the broker counts the
     * delivery and the next consumer gets it marked redelivered.
     */
    @Test
    void aMessageAClosedSessionLeftUnacknowledgedGoesToTheNextConsumerMarkedRedelivered() throws Exception {
        send("ack-unacknowledged", "returned");
        Connection connection = connection("&jms.prefetchPolicy.all=0");
        Session first = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        Message taken = receive(consumer(first, "ack-unacknowledged"));
        assertDeliveryCount(1, taken);
        first.close();

        Session second = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        Message again = receive(consumer(second, "ack-unacknowledged"));
        assertEquals(taken.getJMSMessageID(), again.getJMSMessageID());
        assertDeliveryCount(2, again);
        again.acknowledge();
        assertEventuallyEmpty("ack-unacknowledged");
    }
}
