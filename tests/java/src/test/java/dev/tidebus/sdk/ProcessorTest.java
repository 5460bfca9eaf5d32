package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusErrorContext;
import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessageContext;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;

/**
 * The processor: messages handed to a callback and completed after it, auto lock renewal while
 * a callback outlasts the queue's lock, and explicit settlement with auto-complete off.
 */
class ProcessorTest extends TidebusTest {
    private final List<Throwable> errors = new CopyOnWriteArrayList<>();

    private ServiceBusProcessorClient processor(String queue, Consumer<ServiceBusReceivedMessageContext> onMessage,
        Duration renewFor, boolean autoComplete) {
        var builder = connection().processor()
            .queueName(queue)
            .maxAutoLockRenewDuration(renewFor)
            .processMessage(onMessage)
            .processError((ServiceBusErrorContext context) -> errors.add(context.getException()));
        if (!autoComplete) {
            builder.disableAutoComplete();
        }
        ServiceBusProcessorClient processor = builder.buildProcessorClient();
        closing(processor::close);
        return processor;
    }

    @Test
    void completesEveryMessageAfterTheCallback() {
        sender("proc-basic").sendMessages(numbered("processed", 5));
        List<String> seen = new CopyOnWriteArrayList<>();
        ServiceBusProcessorClient processor = processor("proc-basic", context -> seen.add(body(context.getMessage())),
            Duration.ofMinutes(1), true);
        processor.start();
        eventually(WAIT, "five messages processed, saw " + seen, () -> seen.size() >= 5);
        ServiceBusReceiverClient receiver = receiver("proc-basic");
        eventually(WAIT, "the queue emptied by the processor's completes", () -> firstMessage(receiver) == null);
        processor.stop();
        assertEquals(List.of("processed-0", "processed-1", "processed-2", "processed-3", "processed-4"),
            seen.stream().sorted().toList());
        assertEquals(5, seen.size(), "each message once: " + seen);
        assertTrue(errors.isEmpty(), "processor errors: " + errors);
    }

    /**
     * proc-renew has a 5 s lock; the callback holds the message until twice that has passed
     * since it was received. The processor renews the lock meanwhile (maxAutoLockRenewDuration),
     * so the message is neither redelivered nor lost, and the complete after the callback
     * succeeds: Service Bus renews a lock for as long as the client asks before it lapses.
     */
    @Test
    void renewsTheLockWhileTheCallbackOutlastsIt() {
        sender("proc-renew").sendMessage(text("slow").setMessageId("slow"));
        AtomicInteger deliveries = new AtomicInteger();
        List<Long> deliveryCounts = new CopyOnWriteArrayList<>();
        ConcurrentHashMap<String, Instant> finished = new ConcurrentHashMap<>();
        ServiceBusProcessorClient processor = processor("proc-renew", context -> {
            ServiceBusReceivedMessage message = context.getMessage();
            deliveries.incrementAndGet();
            deliveryCounts.add(message.getDeliveryCount());
            Instant firstLockEnd = message.getLockedUntil().toInstant();
            // Outlast the first lock and a second one: only renewals keep the message ours.
            waitUntilPast(firstLockEnd.plusSeconds(5), Duration.ofSeconds(1));
            finished.put(message.getMessageId(), Instant.now());
        }, Duration.ofMinutes(1), true);
        processor.start();

        eventually(Duration.ofSeconds(40), "the slow callback to finish", () -> finished.containsKey("slow"));
        ServiceBusReceiverClient receiver = receiver("proc-renew");
        eventually(WAIT, "the message completed after the callback", () -> firstMessage(receiver) == null);
        processor.stop();
        assertEquals(1, deliveries.get(), "delivered once, never redelivered (delivery counts " + deliveryCounts + ")");
        assertEquals(List.of(0L), deliveryCounts);
        assertTrue(errors.isEmpty(), "processor errors (a lost lock, a failed complete): " + errors);
        assertNull(firstMessage(receiver));
    }

    @Test
    void settlesExplicitlyWithAutoCompleteOff() {
        sender("proc-manual").sendMessages(numbered("manual", 2));
        List<String> seen = new CopyOnWriteArrayList<>();
        ServiceBusProcessorClient processor = processor("proc-manual", context -> {
            String body = body(context.getMessage());
            seen.add(body);
            if (body.equals("manual-0")) {
                context.complete();
            } else {
                context.deadLetter(new DeadLetterOptions().setDeadLetterReason("Manual"));
            }
        }, Duration.ofMinutes(1), false);
        processor.start();
        eventually(WAIT, "both messages processed, saw " + seen, () -> seen.size() >= 2);
        ServiceBusReceiverClient receiver = receiver("proc-manual");
        eventually(WAIT, "the queue emptied", () -> firstMessage(receiver) == null);
        processor.stop();

        ServiceBusReceivedMessage dead = receiveOne(deadLetterReceiver("proc-manual"));
        assertEquals("manual-1", body(dead));
        assertEquals("Manual", dead.getDeadLetterReason());
        assertEquals(2, seen.size(), "each message once: " + seen);
        assertTrue(errors.isEmpty(), "processor errors: " + errors);
    }
}
