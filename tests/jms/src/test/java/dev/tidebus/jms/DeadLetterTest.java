package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;

import jakarta.jms.Connection;
import jakarta.jms.Message;
import jakarta.jms.Session;
import org.junit.jupiter.api.Test;

/**
 * Dead-lettering as JMS clients reach it: a message a consumer rejects, and one given back
 * more often than the queue's max delivery count. Both end in the queue's dead-letter queue,
 * {@code <queue>/$DeadLetterQueue}, which a JMS consumer reads as a queue of that name.
 */
class DeadLetterTest extends JmsTest {
    /** Qpid JMS's acknowledge type property: the outcome {@code acknowledge()} settles with. */
    private static final String ACK_TYPE = "JMS_AMQP_ACK_TYPE";

    /** {@link #ACK_TYPE} for the AMQP rejected outcome. */
    private static final int REJECTED = 2;

    @Test
    void aRejectedMessageGoesToTheDeadLetterQueue() throws Exception {
        send("deadletter-reject", "poison");
        Message got = receive(consumer(session(Session.CLIENT_ACKNOWLEDGE), "deadletter-reject"));
        got.setIntProperty(ACK_TYPE, REJECTED);
        got.acknowledge();

        Message dead = receive(consumer(session(), "deadletter-reject/$DeadLetterQueue"));
        assertEquals("poison", text(dead));
        assertEquals(got.getJMSMessageID(), dead.getJMSMessageID());
        assertEventuallyEmpty("deadletter-reject");
    }

    /**
     * The queue's max delivery count is 2 (entities.toml). Without prefetch, each session
     * closed with the message unacknowledged gives it back with a failed delivery; the second
     * time it is dead-lettered with Service Bus's reason.
     */
    @Test
    void aMessageGivenBackMaxDeliveryCountTimesIsDeadLetteredWithTheReason() throws Exception {
        send("deadletter-maxdelivery", "unlucky");
        Connection connection = connection("&jms.prefetchPolicy.all=0");
        for (int delivery = 1; delivery <= 2; delivery++) {
            Session session = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            Message got = receive(consumer(session, "deadletter-maxdelivery"));
            assertEquals("unlucky", text(got));
            assertDeliveryCount(delivery, got);
            session.close();
        }

        Message dead = receive(consumer(session(), "deadletter-maxdelivery/$DeadLetterQueue"));
        assertEquals("unlucky", text(dead));
        assertEquals("MaxDeliveryCountExceeded", dead.getStringProperty("DeadLetterReason"));
        assertEventuallyEmpty("deadletter-maxdelivery");
    }
}
