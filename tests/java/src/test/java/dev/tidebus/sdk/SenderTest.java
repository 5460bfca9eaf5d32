package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.util.BinaryData;
import com.azure.messaging.servicebus.ServiceBusException;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusMessageBatch;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Sending: one message with every settable property, a list, a batch, the size limit, a missing queue. */
class SenderTest extends TidebusTest {
    @Test
    @Tag("smoke")
    void sendsOneMessageWithItsProperties() {
        ServiceBusSenderClient sender = sender("send-one");
        OffsetDateTime before = OffsetDateTime.now().minusSeconds(5);
        ServiceBusMessage message = new ServiceBusMessage(BinaryData.fromBytes(new byte[] {1, 2, 3, 0, (byte) 255}))
            .setMessageId("one")
            .setSubject("greeting")
            .setCorrelationId("corr-1")
            .setContentType("application/octet-stream")
            .setReplyTo("send-list")
            .setTo("someone")
            .setTimeToLive(Duration.ofMinutes(10));
        message.getApplicationProperties().put("color", "red");
        message.getApplicationProperties().put("count", 7);
        message.getApplicationProperties().put("ratio", 0.5);
        message.getApplicationProperties().put("flag", true);
        sender.sendMessage(message);

        ServiceBusReceivedMessage got = receiveOne(receiver("send-one"));
        assertArrayEquals(new byte[] {1, 2, 3, 0, (byte) 255}, got.getBody().toBytes());
        assertEquals("one", got.getMessageId());
        assertEquals("greeting", got.getSubject());
        assertEquals("corr-1", got.getCorrelationId());
        assertEquals("application/octet-stream", got.getContentType());
        assertEquals("send-list", got.getReplyTo());
        assertEquals("someone", got.getTo());
        assertEquals(Duration.ofMinutes(10), got.getTimeToLive());
        assertEquals("red", got.getApplicationProperties().get("color"));
        assertEquals(7, got.getApplicationProperties().get("count"));
        assertEquals(0.5, got.getApplicationProperties().get("ratio"));
        assertEquals(true, got.getApplicationProperties().get("flag"));
        // What the broker stamps: a sequence number, the enqueued time, the lock, the expiry,
        // and the delivery count: zero-based on the wire, as Service Bus sends it, and the Java
        // SDK (7.17) shows the wire's value (.NET adds one).
        assertTrue(got.getSequenceNumber() >= 1, "sequence number " + got.getSequenceNumber());
        assertTrue(got.getEnqueuedTime().isAfter(before), "enqueued " + got.getEnqueuedTime());
        assertNotNull(got.getLockToken());
        assertTrue(got.getLockedUntil().isAfter(OffsetDateTime.now()), "locked until " + got.getLockedUntil());
        assertEquals(got.getEnqueuedTime().plus(Duration.ofMinutes(10)).toInstant(), got.getExpiresAt().toInstant());
        assertEquals(0, got.getDeliveryCount());
    }

    @Test
    void sendsAListInOrderWithIncreasingSequenceNumbers() {
        sender("send-list").sendMessages(numbered("listed", 5));
        List<ServiceBusReceivedMessage> got = receiveExactly(receiver("send-list"), 5);
        assertEquals(List.of("listed-0", "listed-1", "listed-2", "listed-3", "listed-4"), bodies(got));
        for (int i = 1; i < got.size(); i++) {
            assertEquals(got.get(i - 1).getSequenceNumber() + 1, got.get(i).getSequenceNumber(),
                "gap-free sequence numbers");
        }
    }

    @Test
    void sendsABatchSizedByTheLinksMaximum() {
        ServiceBusSenderClient sender = sender("send-batch");
        ServiceBusMessageBatch batch = sender.createMessageBatch();
        // The SDK sizes a batch by the max-message-size the broker's attach advertises (1 MiB,
        // the broker's default max_message_size; Service Bus Standard says 256 KB).
        assertEquals(1024 * 1024, batch.getMaxSizeInBytes());
        for (ServiceBusMessage message : numbered("batched", 20)) {
            assertTrue(batch.tryAddMessage(message), "room for " + message.getMessageId());
        }
        // Then 100 KiB messages until the batch is full: ten more fit in 1 MiB, an eleventh does not.
        int large = 0;
        while (batch.tryAddMessage(new ServiceBusMessage(new byte[100 * 1024]).setMessageId("large-" + large))) {
            large++;
        }
        assertEquals(10, large, "100 KiB messages that fit beside 20 small ones");
        sender.sendMessages(batch);

        List<ServiceBusReceivedMessage> got = receiveExactly(receiver("send-batch"), 30);
        List<String> ids = got.stream().map(ServiceBusReceivedMessage::getMessageId).toList();
        assertEquals("batched-0", ids.get(0));
        assertEquals("batched-19", ids.get(19));
        assertEquals("large-9", ids.get(29));
    }

    @Test
    void refusesAMessageOverTheSizeLimit() {
        ServiceBusSenderClient sender = sender("send-large");
        ServiceBusException error = serviceBusError(() -> sender.sendMessage(new ServiceBusMessage(new byte[1536 * 1024])));
        assertReason(ServiceBusFailureReason.MESSAGE_SIZE_EXCEEDED, error);
        ServiceBusReceiverClient receiver = receiver("send-large");
        assertNull(firstMessage(receiver), "nothing was queued");
        // The link is still usable.
        sender.sendMessage(new ServiceBusMessage(new byte[512 * 1024]));
        assertEquals(512 * 1024, receiveOne(receiver).getBody().toBytes().length);
    }

    @Test
    void aMissingQueueIsNotFound() {
        ServiceBusSenderClient sender = sender("no-such-queue");
        ServiceBusException error = serviceBusError(() -> sender.sendMessage(text("lost")));
        assertReason(ServiceBusFailureReason.MESSAGING_ENTITY_NOT_FOUND, error);
    }
}
