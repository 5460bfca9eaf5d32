package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import jakarta.jms.BytesMessage;
import jakarta.jms.MapMessage;
import jakarta.jms.Message;
import jakarta.jms.ObjectMessage;
import jakarta.jms.Session;
import jakarta.jms.StreamMessage;
import jakarta.jms.TextMessage;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The five JMS message types and the bodiless Message each arrive as the type they were sent
 * as, with their body: Qpid JMS maps each to an AMQP body section and an
 * {@code x-opt-jms-msg-type} annotation, which the broker must keep.
 */
@Tag("smoke")
class MessageTypesTest extends JmsTest {
    /** Sends {@code message} (made in {@code session}) to {@code queue} and receives it back. */
    private static Message roundTrip(Session session, String queue, Message message) throws Exception {
        message.setStringProperty("sentAs", message.getClass().getSimpleName());
        session.createProducer(session.createQueue(queue)).send(message);
        Message got = receive(consumer(session, queue));
        assertEquals(message.getJMSMessageID(), got.getJMSMessageID());
        assertEquals(message.getStringProperty("sentAs"), got.getStringProperty("sentAs"));
        return got;
    }

    @Test
    void aTextMessageArrivesWithItsText() throws Exception {
        Session session = session();
        Message got = roundTrip(session, "types-text", session.createTextMessage("text body"));
        assertEquals("text body", assertInstanceOf(TextMessage.class, got).getText());
    }

    @Test
    void aBytesMessageArrivesWithItsBytes() throws Exception {
        Session session = session();
        BytesMessage sent = session.createBytesMessage();
        sent.writeBytes(new byte[] {1, 2, 3, (byte) 0xff});
        BytesMessage got = assertInstanceOf(BytesMessage.class, roundTrip(session, "types-bytes", sent));
        byte[] body = new byte[(int) got.getBodyLength()];
        got.readBytes(body);
        assertArrayEquals(new byte[] {1, 2, 3, (byte) 0xff}, body);
    }

    @Test
    void aMapMessageArrivesWithItsTypedEntries() throws Exception {
        Session session = session();
        MapMessage sent = session.createMapMessage();
        sent.setString("name", "v");
        sent.setInt("count", 42);
        sent.setBoolean("flag", true);
        sent.setBytes("raw", new byte[] {9, 8});
        MapMessage got = assertInstanceOf(MapMessage.class, roundTrip(session, "types-map", sent));
        assertEquals("v", got.getObject("name"));
        assertEquals(42, got.getObject("count"));
        assertEquals(true, got.getObject("flag"));
        assertArrayEquals(new byte[] {9, 8}, got.getBytes("raw"));
    }

    @Test
    void aStreamMessageArrivesWithItsValuesInOrder() throws Exception {
        Session session = session();
        StreamMessage sent = session.createStreamMessage();
        sent.writeString("a");
        sent.writeInt(5);
        sent.writeDouble(2.5);
        StreamMessage got = assertInstanceOf(StreamMessage.class, roundTrip(session, "types-stream", sent));
        assertEquals("a", got.readObject());
        assertEquals(5, got.readObject());
        assertEquals(2.5, got.readObject());
    }

    @Test
    void anObjectMessageArrivesWithItsSerializedObject() throws Exception {
        Session session = session();
        ArrayList<String> object = new ArrayList<>(List.of("x", "y"));
        ObjectMessage got = assertInstanceOf(ObjectMessage.class,
            roundTrip(session, "types-object", session.createObjectMessage(object)));
        assertEquals(object, got.getObject());
    }

    @Test
    void aMessageWithoutABodyArrivesAsAPlainMessage() throws Exception {
        Session session = session();
        Message got = roundTrip(session, "types-plain", session.createMessage());
        for (Class<?> bodied : List.of(TextMessage.class, BytesMessage.class, MapMessage.class, StreamMessage.class,
            ObjectMessage.class)) {
            assertEquals(false, bodied.isInstance(got), () -> "a plain Message arrived as a " + bodied.getSimpleName());
        }
    }
}
