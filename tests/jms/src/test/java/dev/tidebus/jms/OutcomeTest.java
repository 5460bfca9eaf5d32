package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;

import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.Session;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The AMQP outcome a Qpid JMS client chooses for {@code acknowledge()} with its
 * {@code JMS_AMQP_ACK_TYPE} property, and the Service Bus operation each maps to (Microsoft's
 * "Azure Service Bus JMS 2.0 developer guide"): ACCEPTED completes, REJECTED dead-letters
 * (DeadLetterTest), RELEASED unlocks, MODIFIED_FAILED abandons (the delivery counts), and
 * MODIFIED_FAILED_UNDELIVERABLE defers.
 */
class OutcomeTest extends JmsTest {
    private static final String ACK_TYPE = "JMS_AMQP_ACK_TYPE";
    private static final int RELEASED = 3;
    private static final int MODIFIED_FAILED = 4;
    private static final int MODIFIED_FAILED_UNDELIVERABLE = 5;

    /** Receives the next message of {@code consumer} (CLIENT_ACKNOWLEDGE) and settles it with {@code ackType}. */
    private Message settleWith(MessageConsumer consumer, int ackType) throws Exception {
        Message got = receive(consumer);
        got.setIntProperty(ACK_TYPE, ackType);
        got.acknowledge();
        return got;
    }

    @Test
    void aReleasedMessageIsUnlockedAndDeliveredAgain() throws Exception {
        send("outcome-released", "again");
        MessageConsumer consumer = consumer(session(Session.CLIENT_ACKNOWLEDGE), "outcome-released");
        Message first = settleWith(consumer, RELEASED);
        Message again = receive(consumer);
        assertEquals(first.getJMSMessageID(), again.getJMSMessageID());
        again.acknowledge();
        assertEventuallyEmpty("outcome-released");
    }

    @Test
    void aMessageModifiedAsFailedIsAbandonedAndRedeliveredWithTheCount() throws Exception {
        send("outcome-modified", "again");
        MessageConsumer consumer = consumer(session(Session.CLIENT_ACKNOWLEDGE), "outcome-modified");
        Message first = settleWith(consumer, MODIFIED_FAILED);
        assertDeliveryCount(1, first);
        Message again = receive(consumer);
        assertEquals(first.getJMSMessageID(), again.getJMSMessageID());
        assertDeliveryCount(2, again);
        again.acknowledge();
        assertEventuallyEmpty("outcome-modified");
    }

    /**
     * A deferred message is not delivered again: a marker sent after the settlement is the next
     * thing the same consumer (which holds credit) gets, and the queue still holds the deferred
     * message for a receive by sequence number.
     */
    @Test
    void aMessageModifiedAsUndeliverableIsDeferred() throws Exception {
        send("outcome-undeliverable", "deferred");
        Session session = session(Session.CLIENT_ACKNOWLEDGE);
        MessageConsumer consumer = consumer(session, "outcome-undeliverable");
        settleWith(consumer, MODIFIED_FAILED_UNDELIVERABLE);
        send("outcome-undeliverable", "marker");
        Message next = receive(consumer);
        assertEquals("marker", text(next), "the deferred message was delivered again");
        next.acknowledge();
        eventually(Duration.ofMillis(WAIT_MS), () -> "the queue to hold only the deferred message",
            () -> browse("outcome-undeliverable").equals(List.of("deferred")));
    }
}
