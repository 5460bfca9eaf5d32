package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;

import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Transacted sessions (Qpid JMS declares an AMQP transaction on the broker's coordinator and
 * discharges it on commit and rollback). What is not yet delivered is shown by a marker sent
 * outside the transaction arriving first (queues are FIFO), not by waiting for nothing.
 */
class TransactionTest extends JmsTest {
    @Test
    void aTransactedSendIsDeliveredOnlyOnceCommitted() throws Exception {
        Session transacted = connection().createSession(true, Session.SESSION_TRANSACTED);
        transacted.createProducer(transacted.createQueue("tx-send-commit")).send(transacted.createTextMessage("held"));
        send("tx-send-commit", "marker");

        MessageConsumer consumer = consumer(session(), "tx-send-commit");
        assertEquals("marker", receiveText(consumer), "the uncommitted send was delivered");
        transacted.commit();
        assertEquals("held", receiveText(consumer));
    }

    @Test
    void aRolledBackSendIsNeverDelivered() throws Exception {
        Session transacted = connection().createSession(true, Session.SESSION_TRANSACTED);
        MessageProducer producer = transacted.createProducer(transacted.createQueue("tx-send-rollback"));
        producer.send(transacted.createTextMessage("rolled-back"));
        transacted.rollback();
        producer.send(transacted.createTextMessage("committed"));
        transacted.commit();

        MessageConsumer consumer = consumer(session(), "tx-send-rollback");
        assertEquals("committed", receiveText(consumer), "the rolled-back send was delivered");
        assertEventuallyEmpty("tx-send-rollback");
    }

    @Test
    void aTransactedReceiveTakesTheMessageOffTheQueueOnCommit() throws Exception {
        send("tx-receive-commit", "taken");
        Session transacted = connection().createSession(true, Session.SESSION_TRANSACTED);
        assertEquals("taken", receiveText(consumer(transacted, "tx-receive-commit")));
        assertEquals(List.of("taken"), browse("tx-receive-commit"), "before the commit, still on the queue");
        transacted.commit();
        assertEventuallyEmpty("tx-receive-commit");
    }

    @Test
    void aRolledBackReceiveIsRedeliveredMarkedRedelivered() throws Exception {
        send("tx-receive-rollback", "returned");
        Session transacted = connection().createSession(true, Session.SESSION_TRANSACTED);
        MessageConsumer consumer = consumer(transacted, "tx-receive-rollback");
        Message first = receive(consumer);
        assertDeliveryCount(1, first);
        transacted.rollback();

        Message again = receive(consumer);
        assertEquals(first.getJMSMessageID(), again.getJMSMessageID());
        assertDeliveryCount(2, again);
        transacted.commit();
        assertEventuallyEmpty("tx-receive-rollback");
    }
}
