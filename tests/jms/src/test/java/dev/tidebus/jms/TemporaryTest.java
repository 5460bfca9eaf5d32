package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.Connection;
import jakarta.jms.Destination;
import jakarta.jms.InvalidDestinationException;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.Session;
import jakarta.jms.TemporaryQueue;
import jakarta.jms.TemporaryTopic;
import jakarta.jms.TextMessage;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Temporary queues and topics (issue 55): Qpid JMS attaches a sender whose target is dynamic,
 * with capability temporary-queue or temporary-topic and lifetime delete-on-close; the broker
 * makes the node, names it in its reply ({@code $temp-queue-...}) and deletes it when that link
 * detaches ({@code delete()}) or its connection ends. Only the connection that made it may
 * consume from it; any may send to it.
 */
class TemporaryTest extends JmsTest {
    /**
     * Request/reply: the requester's JMSReplyTo is its temporary queue (the reply-to address and
     * the x-opt-jms-reply-to annotation, which say it is temporary); a responder on another
     * connection answers there.
     */
    @Test
    @Tag("smoke")
    void aTemporaryQueueCarriesTheReplyToARequestFromAnotherConnection() throws Exception {
        Session requester = session();
        TemporaryQueue replies = requester.createTemporaryQueue();
        assertTrue(replies.getQueueName().startsWith("$temp-queue-"), replies.getQueueName());
        MessageConsumer answers = requester.createConsumer(replies);
        TextMessage request = requester.createTextMessage("ping");
        request.setJMSReplyTo(replies);
        requester.createProducer(requester.createQueue("temporary-requests")).send(request);

        Session responder = session();
        Message got = receive(consumer(responder, "temporary-requests"));
        Destination replyTo = got.getJMSReplyTo();
        assertTrue(replyTo instanceof TemporaryQueue, "JMSReplyTo reads back as a temporary queue: " + replyTo);
        assertEquals(replies.getQueueName(), ((TemporaryQueue) replyTo).getQueueName());
        responder.createProducer(null).send(replyTo, responder.createTextMessage("pong"));
        assertEquals("pong", receiveText(answers));
        answers.close();
        replies.delete();
    }

    @Test
    void deletingATemporaryQueueRemovesItWithItsMessages() throws Throwable {
        TemporaryQueue queue = session().createTemporaryQueue();
        assertDeletionRemoves(queue.getQueueName(), true, queue::delete);
    }

    @Test
    void aTemporaryQueueGoesWithTheConnectionThatMadeIt() throws Exception {
        Connection owner = connection();
        String name = owner.createSession(false, Session.AUTO_ACKNOWLEDGE).createTemporaryQueue().getQueueName();
        owner.close();
        Session other = session();
        // The broker answers the close before it tears the connection down.
        eventually(WAIT, () -> name + " still takes messages", () -> refusedAsMissing(other, other.createQueue(name)));
    }

    /**
     * The broker refuses another connection's consumer with amqp:resource-locked (Qpid JMS
     * itself refuses a consumer of a JMSReplyTo temporary queue it did not make; a plain queue
     * of the same name reaches the broker).
     */
    @Test
    void anotherConnectionMayNotConsumeFromATemporaryQueue() throws Exception {
        TemporaryQueue queue = session().createTemporaryQueue();
        Session other = session();
        JMSException refused = thrown(JMSException.class,
            () -> other.createConsumer(other.createQueue(queue.getQueueName())));
        assertTrue(refused.getMessage().contains("amqp:resource-locked"), refused.getMessage());
    }

    @Test
    void deletingATemporaryTopicRemovesIt() throws Throwable {
        TemporaryTopic topic = session().createTemporaryTopic();
        assertTrue(topic.getTopicName().startsWith("$temp-topic-"), topic.getTopicName());
        assertDeletionRemoves(topic.getTopicName(), false, topic::delete);
    }

    /** A JMS consumer of the temporary topic gets a subscription of its own, as on any topic. */
    @Test
    void aTemporaryTopicDeliversToItsConsumer() throws Exception {
        Session session = session();
        TemporaryTopic topic = session.createTemporaryTopic();
        MessageConsumer consumer = session.createConsumer(topic);
        Session other = session();
        other.createProducer(other.createTopic(topic.getTopicName())).send(other.createTextMessage("fleeting"));
        assertEquals("fleeting", receiveText(consumer));
        consumer.close();
        topic.delete();
    }

    /**
     * Sends to the temporary queue (or topic) {@code name} from another connection, runs
     * {@code delete} ({@code delete()} detaches the link that made it, answered once the node
     * is gone), and asserts that a producer of the name is refused from then on. The name is
     * used as a plain destination: Qpid JMS refuses a deleted temporary's own object itself.
     */
    void assertDeletionRemoves(String name, boolean queue, Executable delete) throws Throwable {
        Session other = session();
        Destination plain = queue ? other.createQueue(name) : other.createTopic(name);
        other.createProducer(plain).send(other.createTextMessage("left behind"));
        delete.execute();
        assertTrue(refusedAsMissing(other, plain), name + " still takes messages");
    }

    /** Whether a producer of {@code destination} is refused as an invalid destination (not found). */
    static boolean refusedAsMissing(Session session, Destination destination) throws JMSException {
        try {
            session.createProducer(destination).close();
            return false;
        } catch (InvalidDestinationException missing) {
            return true;
        }
    }
}
