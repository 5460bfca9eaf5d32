package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.models.ServiceBusMessageState;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Scheduled messages: held until their time, then delivered; cancelled ones never arrive. */
class ScheduleTest extends TidebusTest {
    @Test
    void aScheduledMessageArrivesAtItsTime() {
        ServiceBusSenderClient sender = sender("sched-due");
        OffsetDateTime due = OffsetDateTime.now().plusSeconds(3).truncatedTo(ChronoUnit.MILLIS);
        long sequenceNumber = sender.scheduleMessage(text("later"), due);

        ServiceBusReceiverClient receiver = receiver("sched-due");
        ServiceBusReceivedMessage peeked = receiver.peekMessage(sequenceNumber);
        assertEquals(ServiceBusMessageState.SCHEDULED, peeked.getState());
        assertEquals(due.toInstant(), peeked.getScheduledEnqueueTime().toInstant());

        ServiceBusReceivedMessage got = receiveOne(receiver);
        assertTrue(!OffsetDateTime.now().isBefore(due), "received before its time " + due);
        assertEquals("later", body(got));
        // Service Bus: "The SequenceNumber for a scheduled message is only valid while the
        // message is in this state. As the message transitions to the active state, the message
        // is appended to the queue as if had been enqueued at the current instant, which
        // includes assigning a new SequenceNumber." (message-sequencing.md)
        assertTrue(got.getSequenceNumber() > sequenceNumber,
            "activated with a new number: " + got.getSequenceNumber() + " after " + sequenceNumber);
        assertFalse(got.getEnqueuedTime().isBefore(due.minusSeconds(1)), "enqueued at " + got.getEnqueuedTime());
        receiver.complete(got);
    }

    @Test
    void aCancelledScheduledMessageNeverArrives() {
        ServiceBusSenderClient sender = sender("sched-cancel");
        OffsetDateTime due = OffsetDateTime.now().plusSeconds(2);
        List<Long> numbers = new ArrayList<>();
        sender.scheduleMessages(numbered("cancelled", 2), due).forEach(numbers::add);
        assertEquals(2, numbers.size());
        long kept = sender.scheduleMessage(text("kept"), due);
        numbers.forEach(sender::cancelScheduledMessage);

        ServiceBusReceiverClient receiver = receiver("sched-cancel");
        for (long number : numbers) {
            ServiceBusReceivedMessage peeked = receiver.peekMessage(number);
            assertTrue(peeked == null || peeked.getSequenceNumber() != number, "cancelled " + number + " is gone");
        }
        ServiceBusReceivedMessage got = receiveOne(receiver);
        assertEquals("kept", body(got));
        assertTrue(got.getSequenceNumber() > kept, "activated with a new number");
        receiver.complete(got);
        assertDrained(receiver);
        // The receive above waited past the due time, so the cancelled ones would have come.
        assertTrue(OffsetDateTime.now().isAfter(due.plus(Duration.ofSeconds(1))));
    }
}
