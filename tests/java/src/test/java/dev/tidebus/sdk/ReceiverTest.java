package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusException;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.models.AbandonOptions;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import com.azure.messaging.servicebus.models.ServiceBusMessageState;
import com.azure.messaging.servicebus.models.ServiceBusReceiveMode;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * Receiving in peek-lock and receive-and-delete; complete, abandon, defer and receive by
 * sequence number, dead-letter with a reason, the delivery limit, peek, lock renewal and a lost
 * lock.
 */
class ReceiverTest extends TidebusTest {
    @Test
    void peekLockCompletesAndNothingComesBack() {
        sender("recv-complete").sendMessages(numbered("complete", 3));
        ServiceBusReceiverClient receiver = receiver("recv-complete");
        List<ServiceBusReceivedMessage> got = receiveExactly(receiver, 3);
        assertEquals(List.of("complete-0", "complete-1", "complete-2"), bodies(got));
        got.forEach(receiver::complete);
        assertDrained(receiver);
    }

    @Test
    void abandonRedeliversWithTheCountAndModifiedProperties() {
        sender("recv-abandon").sendMessage(text("again"));
        ServiceBusReceiverClient receiver = receiver("recv-abandon");
        ServiceBusReceivedMessage first = receiveOne(receiver);
        assertEquals(0, first.getDeliveryCount());
        receiver.abandon(first, new AbandonOptions().setPropertiesToModify(Map.of("attempt", "first")));

        ServiceBusReceivedMessage second = receiveOne(receiver);
        assertEquals(first.getSequenceNumber(), second.getSequenceNumber());
        assertEquals(1, second.getDeliveryCount(), "an abandon counts a delivery");
        assertEquals("first", second.getApplicationProperties().get("attempt"));
        receiver.complete(second);
        assertNothingToReceive(receiver);
    }

    @Test
    void deferredMessagesAreReceivedBySequenceNumberOnly() {
        sender("recv-defer").sendMessages(numbered("deferred", 2));
        ServiceBusReceiverClient receiver = receiver("recv-defer");
        List<ServiceBusReceivedMessage> got = receiveExactly(receiver, 2);
        got.forEach(receiver::defer);
        assertNothingToReceive(receiver);

        ServiceBusReceivedMessage peeked = receiver.peekMessage(got.get(0).getSequenceNumber());
        assertEquals(ServiceBusMessageState.DEFERRED, peeked.getState());

        ServiceBusReceivedMessage one = receiver.receiveDeferredMessage(got.get(0).getSequenceNumber());
        assertEquals("deferred-0", body(one));
        assertEquals(ServiceBusMessageState.DEFERRED, one.getState());
        receiver.complete(one);

        List<ServiceBusReceivedMessage> rest = new ArrayList<>();
        receiver.receiveDeferredMessageBatch(List.of(got.get(1).getSequenceNumber())).forEach(rest::add);
        assertEquals(List.of("deferred-1"), bodies(rest));
        receiver.complete(rest.get(0));
        assertNull(firstMessage(receiver), "both deferred messages completed");
    }

    @Test
    void deadLetteredMessagesKeepTheirReasonInTheDeadLetterQueue() {
        sender("recv-deadletter").sendMessage(text("poison").setMessageId("poison"));
        ServiceBusReceiverClient receiver = receiver("recv-deadletter");
        ServiceBusReceivedMessage got = receiveOne(receiver);
        receiver.deadLetter(got, new DeadLetterOptions().setDeadLetterReason("BadInput")
            .setDeadLetterErrorDescription("cannot parse")
            .setPropertiesToModify(Map.of("seen-by", "java")));
        assertNothingToReceive(receiver);

        ServiceBusReceiverClient deadLetters = deadLetterReceiver("recv-deadletter");
        ServiceBusReceivedMessage dead = receiveOne(deadLetters);
        assertEquals("poison", dead.getMessageId());
        assertEquals(got.getSequenceNumber(), dead.getSequenceNumber());
        assertEquals("BadInput", dead.getDeadLetterReason());
        assertEquals("cannot parse", dead.getDeadLetterErrorDescription());
        assertEquals("java", dead.getApplicationProperties().get("seen-by"));
        deadLetters.complete(dead);
        assertNothingToReceive(deadLetters);
    }

    @Test
    void theDeliveryLimitDeadLettersTheMessage() {
        // recv-maxdelivery has max_delivery_count = 2.
        sender("recv-maxdelivery").sendMessage(text("twice"));
        ServiceBusReceiverClient receiver = receiver("recv-maxdelivery");
        receiver.abandon(receiveOne(receiver));
        receiver.abandon(receiveOne(receiver));
        assertNothingToReceive(receiver);

        ServiceBusReceivedMessage dead = receiveOne(deadLetterReceiver("recv-maxdelivery"));
        assertEquals("twice", body(dead));
        assertEquals("MaxDeliveryCountExceeded", dead.getDeadLetterReason());
    }

    @Test
    void receiveAndDeleteTakesTheMessageAway() {
        sender("recv-delete").sendMessages(numbered("deleted", 2));
        ServiceBusReceiverClient receiver = receiver("recv-delete", ServiceBusReceiveMode.RECEIVE_AND_DELETE);
        List<ServiceBusReceivedMessage> got = receiveExactly(receiver, 2);
        assertEquals(List.of("deleted-0", "deleted-1"), bodies(got));
        assertNull(got.get(0).getLockedUntil(), "no lock in receive-and-delete");
        assertNull(firstMessage(receiver), "received messages are deleted");
    }

    @Test
    void peekShowsMessagesWithoutLockingOrCounting() {
        sender("recv-peek").sendMessages(numbered("peeked", 3));
        ServiceBusReceiverClient receiver = receiver("recv-peek");
        List<ServiceBusReceivedMessage> peeked = new ArrayList<>();
        receiver.peekMessages(3).forEach(peeked::add);
        assertEquals(List.of("peeked-0", "peeked-1", "peeked-2"), bodies(peeked));
        assertEquals(ServiceBusMessageState.ACTIVE, peeked.get(0).getState());

        ServiceBusReceivedMessage third = receiver.peekMessage(peeked.get(2).getSequenceNumber());
        assertEquals("peeked-2", body(third));

        List<ServiceBusReceivedMessage> got = receiveExactly(receiver, 3);
        assertEquals(0, got.get(0).getDeliveryCount(), "a peek is no delivery");
        // A locked message is still peeked (Service Bus shows it while locked).
        assertEquals("peeked-0", body(receiver.peekMessage(peeked.get(0).getSequenceNumber())));
        got.forEach(receiver::complete);
    }

    @Test
    void renewingALockExtendsIt() {
        sender("recv-renew").sendMessage(text("renew"));
        ServiceBusReceiverClient receiver = receiver("recv-renew");
        ServiceBusReceivedMessage got = receiveOne(receiver);
        OffsetDateTime before = got.getLockedUntil();
        // A renewal a second later ends its lock (a minute, the default) a second later.
        waitUntilPast(java.time.Instant.now(), Duration.ofSeconds(1));
        OffsetDateTime renewed = receiver.renewMessageLock(got);
        assertTrue(renewed.isAfter(before), "renewed to " + renewed + ", was " + before);
        receiver.complete(got);
    }

    @Test
    void aLapsedLockIsLostAndTheMessageComesBack() {
        // recv-lockloss has a 2 s lock. The SDK's receivers renew their locks for up to 5 minutes
        // unless told not to.
        sender("recv-lockloss").sendMessage(text("slow"));
        ServiceBusReceiverClient receiver = closing(
            connection().receiver().queueName("recv-lockloss").maxAutoLockRenewDuration(Duration.ZERO).buildClient());
        ServiceBusReceivedMessage got = receiveOne(receiver);
        assertNotNull(got.getLockedUntil());
        waitUntilPast(got.getLockedUntil().toInstant(), Duration.ofMillis(500));

        ServiceBusException error = serviceBusError(() -> receiver.complete(got));
        assertReason(ServiceBusFailureReason.MESSAGE_LOCK_LOST, error);
        ServiceBusReceivedMessage again = receiveOne(receiver);
        assertEquals(got.getSequenceNumber(), again.getSequenceNumber());
        assertEquals(1, again.getDeliveryCount(), "a lapsed lock counts a delivery");
        receiver.complete(again);
    }
}
