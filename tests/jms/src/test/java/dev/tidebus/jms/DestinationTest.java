package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.InvalidDestinationException;
import jakarta.jms.Session;
import org.junit.jupiter.api.Test;

/**
 * Destinations: a queue the namespace does not have (temporary queues and topics: TemporaryTest).
 */
class DestinationTest extends JmsTest {
    /** The broker answers amqp:not-found, which Qpid JMS raises as InvalidDestinationException. */
    @Test
    void aProducerForAQueueThatDoesNotExistIsRefusedAsAnInvalidDestination() throws Exception {
        Session session = session();
        InvalidDestinationException refused = thrown(InvalidDestinationException.class,
            () -> session.createProducer(session.createQueue("destination-missing")).send(session.createTextMessage("x")));
        assertTrue(refused.getMessage().contains("destination-missing"), refused.getMessage());
    }

    @Test
    void aConsumerForAQueueThatDoesNotExistIsRefusedAsAnInvalidDestination() throws Exception {
        Session session = session();
        InvalidDestinationException refused = thrown(InvalidDestinationException.class,
            () -> session.createConsumer(session.createQueue("destination-missing")));
        assertTrue(refused.getMessage().contains("destination-missing"), refused.getMessage());
    }
}
