package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusException;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.ServiceBusTransactionContext;
import com.azure.messaging.servicebus.models.AbandonOptions;
import com.azure.messaging.servicebus.models.CompleteOptions;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import com.azure.messaging.servicebus.models.DeferOptions;
import com.azure.messaging.servicebus.models.ServiceBusMessageState;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Transactions, as Service Bus documents them (service-bus-transactions.md): the work of a
 * transaction (sends and settlements) takes effect at its commit and not at all on a rollback; a
 * transaction works on one entity unless the client routes its sends through a via entity
 * (`enableCrossEntityTransactions`: the first entity the connection works on becomes the via
 * entity, and sends to other entities are transferred through it at the commit).
 */
class TransactionTest extends TidebusTest {
    private static CompleteOptions in(ServiceBusTransactionContext transaction) {
        return new CompleteOptions().setTransactionContext(transaction);
    }

    @Test
    void sendsTakeEffectAtTheCommit() {
        ServiceBusSenderClient sender = sender("tx-send");
        ServiceBusReceiverClient receiver = receiver("tx-send");
        ServiceBusTransactionContext transaction = sender.createTransaction();
        assertNotNull(transaction.getTransactionId());
        sender.sendMessages(numbered("staged", 2), transaction);
        assertNull(firstMessage(receiver), "a transaction's sends are not in the queue before its commit");
        assertNothingToReceive(receiver);

        sender.commitTransaction(transaction);
        List<ServiceBusReceivedMessage> got = receiveExactly(receiver, 2);
        assertEquals(List.of("staged-0", "staged-1"), bodies(got));
        got.forEach(receiver::complete);
    }

    @Test
    void aRolledBackSendLeavesNothing() {
        ServiceBusSenderClient sender = sender("tx-rollback-send");
        ServiceBusReceiverClient receiver = receiver("tx-rollback-send");
        ServiceBusTransactionContext transaction = sender.createTransaction();
        sender.sendMessage(text("never"), transaction);
        sender.rollbackTransaction(transaction);
        assertNull(firstMessage(receiver), "nothing of a rolled-back send");

        sender.sendMessage(text("after"));
        ServiceBusReceivedMessage got = receiveOne(receiver);
        assertEquals("after", body(got));
        receiver.complete(got);
        assertNothingToReceive(receiver);
    }

    /** The usual shape: complete the input and send the output in one transaction. */
    @Test
    @Tag("smoke")
    void aCompleteAndASendCommitTogether() {
        ServiceBusSenderClient sender = sender("tx-work");
        ServiceBusReceiverClient receiver = receiver("tx-work");
        sender.sendMessage(text("input"));
        ServiceBusReceivedMessage input = receiveOne(receiver);

        ServiceBusTransactionContext transaction = receiver.createTransaction();
        // The SDK waits for the broker's answer to a transactional settlement (a disposition
        // whose state is transactional-state carrying the outcome) and fails on anything else.
        receiver.complete(input, in(transaction));
        sender.sendMessage(text("output"), transaction);
        // Before the commit the input is still there (locked) and the output is not.
        ServiceBusReceivedMessage stillThere = firstMessage(receiver);
        assertNotNull(stillThere, "the input stays until the commit");
        assertEquals(input.getSequenceNumber(), stillThere.getSequenceNumber());

        receiver.commitTransaction(transaction);
        ServiceBusReceivedMessage output = receiveOne(receiver);
        assertEquals("output", body(output));
        receiver.complete(output);
        // The output received, and the input completed by the commit.
        assertDrained(receiver);
    }

    /**
     * Every settlement Service Bus lists as transactional (complete, abandon, dead-letter, defer),
     * and a schedule, in one transaction: none takes effect before the commit, all at it.
     */
    @Test
    void everyKindOfSettlementAndAScheduleCommitTogether() {
        ServiceBusSenderClient sender = sender("tx-kinds");
        sender.sendMessages(numbered("kind", 4));
        ServiceBusReceiverClient receiver = receiver("tx-kinds");
        List<ServiceBusReceivedMessage> got = receiveExactly(receiver, 4);

        ServiceBusTransactionContext transaction = receiver.createTransaction();
        receiver.complete(got.get(0), in(transaction));
        receiver.abandon(got.get(1), new AbandonOptions().setTransactionContext(transaction));
        receiver.deadLetter(got.get(2), new DeadLetterOptions().setDeadLetterReason("InTransaction")
            .setTransactionContext(transaction));
        receiver.defer(got.get(3), new DeferOptions().setTransactionContext(transaction));
        long scheduled = sender.scheduleMessage(text("scheduled"), OffsetDateTime.now().plusHours(1), transaction);
        // Before the commit every message is where the receive left it, locked; the scheduled
        // message is not there yet.
        assertEquals(ServiceBusMessageState.ACTIVE, receiver.peekMessage(got.get(3).getSequenceNumber()).getState());
        assertNothingToReceive(receiver);
        receiver.commitTransaction(transaction);

        ServiceBusReceivedMessage abandoned = receiveOne(receiver);
        assertEquals("kind-1", body(abandoned));
        assertEquals(1, abandoned.getDeliveryCount(), "the abandon counted a delivery");
        receiver.complete(abandoned);
        ServiceBusReceivedMessage dead = receiveOne(deadLetterReceiver("tx-kinds"));
        assertEquals("kind-2", body(dead));
        assertEquals("InTransaction", dead.getDeadLetterReason());
        ServiceBusReceivedMessage deferred = receiver.receiveDeferredMessage(got.get(3).getSequenceNumber());
        assertEquals("kind-3", body(deferred));
        receiver.complete(deferred);
        ServiceBusReceivedMessage held = receiver.peekMessage(scheduled);
        assertEquals(ServiceBusMessageState.SCHEDULED, held.getState());
        assertEquals("scheduled", body(held));
        sender.cancelScheduledMessage(scheduled);
    }

    /**
     * A rollback undoes a transactional complete: the message is not deleted, and its lock is not
     * released either (nobody gets it while the lock lasts); it comes back when the lock ends.
     * (The SDK counts the message settled once the transactional complete was answered and stops
     * renewing its lock, so the test waits for the queue's 5 s lock rather than settling again.)
     */
    @Test
    void aRolledBackCompleteLeavesTheMessageUntilItsLockEnds() {
        sender("tx-rollback-complete").sendMessage(text("kept"));
        ServiceBusReceiverClient receiver = receiver("tx-rollback-complete");
        ServiceBusReceivedMessage got = receiveOne(receiver);

        ServiceBusTransactionContext transaction = receiver.createTransaction();
        receiver.complete(got, in(transaction));
        receiver.rollbackTransaction(transaction);

        ServiceBusReceivedMessage peeked = firstMessage(receiver);
        assertNotNull(peeked, "the rolled-back complete deleted nothing");
        assertEquals(got.getSequenceNumber(), peeked.getSequenceNumber());
        assertNothingToReceive(receiver);
        waitUntilPast(got.getLockedUntil().toInstant(), Duration.ZERO);
        ServiceBusReceivedMessage again = receiveOne(receiver);
        assertEquals(got.getSequenceNumber(), again.getSequenceNumber());
        assertEquals(1, again.getDeliveryCount(), "back after its lock lapsed, a delivery counted");
        receiver.complete(again);
        assertNull(firstMessage(receiver));
    }

    /**
     * Without a via entity a transaction cannot span two queues (Service Bus: "Local transactions
     * cannot span multiple top-level entities such as queue or topic."): the broker rejects the
     * transactional send to the second queue (disposition transactional-state{rejected}), so
     * nothing reaches it. The Java SDK does not surface that rejection (core-amqp's ReactorSender
     * completes a send made with a delivery state on whatever state comes back, so sendMessage
     * returns normally), but the refusal dooms the transaction: its commit is rejected with
     * amqp:transaction:rollback, so the complete in it is not applied either — the transaction's
     * work succeeds or fails together.
     */
    @Test
    void aTransactionWithoutViaCannotSpanTwoQueues() {
        sender("tx-local-in").sendMessage(text("input"));
        ServiceBusReceiverClient receiver = receiver("tx-local-in");
        ServiceBusSenderClient out = sender("tx-local-out");
        ServiceBusReceivedMessage input = receiveOne(receiver);

        ServiceBusTransactionContext transaction = receiver.createTransaction();
        receiver.complete(input, in(transaction));
        out.sendMessage(text("output"), transaction);
        ServiceBusException refused =
                assertThrows(ServiceBusException.class, () -> receiver.commitTransaction(transaction));
        assertTrue(
                refused.getMessage().contains("Local transactions cannot span multiple top-level entities"),
                refused.getMessage());

        // Nothing was sent to the second queue, and the input was not completed: it is still
        // there, locked by its receiver until its lock ends (the SDK counts it settled already).
        assertDrained(receiver("tx-local-out"));
        ServiceBusReceivedMessage stillThere = firstMessage(receiver);
        assertNotNull(stillThere, "the rolled-back complete left the input");
        assertEquals(input.getSequenceNumber(), stillThere.getSequenceNumber());
    }

    /**
     * enableCrossEntityTransactions: the receiver works first, so its queue is the via entity;
     * the sends to two other queues go through it and arrive at the commit, with the complete.
     */
    @Test
    void aCrossEntityTransactionCompletesAndSendsToTwoQueues() {
        sender("xtx-in").sendMessage(text("order"));
        ServiceBusClientBuilder crossEntity = builder().enableCrossEntityTransactions();
        ServiceBusReceiverClient receiver = closing(crossEntity.receiver().queueName("xtx-in").buildClient());
        ServiceBusReceivedMessage order = receiveOne(receiver);
        ServiceBusSenderClient first = closing(crossEntity.sender().queueName("xtx-out-1").buildClient());
        ServiceBusSenderClient second = closing(crossEntity.sender().queueName("xtx-out-2").buildClient());

        ServiceBusTransactionContext transaction = receiver.createTransaction();
        receiver.complete(order, in(transaction));
        first.sendMessage(text("invoice"), transaction);
        second.sendMessage(text("shipment"), transaction);
        assertNull(firstMessage(receiver("xtx-out-1")), "nothing transferred before the commit");
        receiver.commitTransaction(transaction);

        ServiceBusReceiverClient invoices = receiver("xtx-out-1");
        ServiceBusReceiverClient shipments = receiver("xtx-out-2");
        ServiceBusReceivedMessage invoice = receiveOne(invoices);
        ServiceBusReceivedMessage shipment = receiveOne(shipments);
        assertEquals("invoice", body(invoice));
        assertEquals("shipment", body(shipment));
        invoices.complete(invoice);
        shipments.complete(shipment);
        eventually(WAIT, "the order completed by the commit", () -> firstMessage(receiver("xtx-in")) == null);
        // The sends went through the via entity's transfer queue, empty once they moved on.
        eventually(WAIT, "xtx-in's transfers moved on",
            () -> administration().getQueueRuntimeProperties("xtx-in").getTransferMessageCount() == 0);
    }

    @Test
    void aRolledBackCrossEntityTransactionTransfersNothing() {
        sender("xtx-rb-in").sendMessage(text("order"));
        ServiceBusClientBuilder crossEntity = builder().enableCrossEntityTransactions();
        ServiceBusReceiverClient receiver = closing(crossEntity.receiver().queueName("xtx-rb-in").buildClient());
        ServiceBusReceivedMessage order = receiveOne(receiver);
        ServiceBusSenderClient out = closing(crossEntity.sender().queueName("xtx-rb-out").buildClient());

        ServiceBusTransactionContext transaction = receiver.createTransaction();
        receiver.complete(order, in(transaction));
        out.sendMessage(text("never"), transaction);
        receiver.rollbackTransaction(transaction);

        ServiceBusReceiverClient outReceiver = receiver("xtx-rb-out");
        // Nothing was transferred.
        assertDrained(outReceiver);
        ServiceBusReceivedMessage peeked = firstMessage(receiver("xtx-rb-in"));
        assertNotNull(peeked, "the order is still there");
        // xtx-rb-in has a 5 s lock: the order comes back when it ends, to be completed plainly.
        waitUntilPast(order.getLockedUntil().toInstant(), Duration.ZERO);
        ServiceBusReceivedMessage again = receiveOne(receiver);
        assertEquals(order.getSequenceNumber(), again.getSequenceNumber());
        receiver.complete(again);
        eventually(WAIT, "the order completed", () -> firstMessage(receiver("xtx-rb-in")) == null);
    }
}
