package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.amqp.exception.AmqpErrorCondition;
import com.azure.core.amqp.exception.AmqpException;
import com.azure.messaging.servicebus.ServiceBusErrorContext;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSessionReceiverClient;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Sessions: a named session's messages only and in order, session state kept across receivers,
 * the next available session (the one whose oldest message came first), a session held
 * elsewhere refused, and the session processor.
 */
class SessionTest extends TidebusTest {
    private ServiceBusSessionReceiverClient sessions(String queue) {
        return closing(connection().sessionReceiver().queueName(queue).buildClient());
    }

    /** Messages {@code session/0..count-1} in {@code session}, interleaved by the caller. */
    private static ServiceBusMessage inSession(String session, int index) {
        return new ServiceBusMessage(session + "/" + index).setSessionId(session);
    }

    /**
     * Accepts {@code session} on a new connection, trying again while the broker still holds it
     * for a receiver that just closed (the SDK's close does not wait for the detach).
     */
    private ServiceBusReceiverClient acceptWhenFree(String queue, String session) {
        ServiceBusSessionReceiverClient sessions = closing(builder().sessionReceiver().queueName(queue).buildClient());
        Instant deadline = Instant.now().plus(WAIT);
        while (true) {
            try {
                return closing(sessions.acceptSession(session));
            } catch (AmqpException e) {
                if (e.getErrorCondition() != AmqpErrorCondition.SESSION_CANNOT_BE_LOCKED || Instant.now().isAfter(deadline)) {
                    throw e;
                }
            }
        }
    }

    @Test
    void aNamedSessionGetsOnlyItsMessagesInOrder() {
        List<ServiceBusMessage> interleaved = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            interleaved.add(inSession("a", i));
            interleaved.add(inSession("b", i));
        }
        sender("sess-order").sendMessages(interleaved);

        ServiceBusReceiverClient a = closing(sessions("sess-order").acceptSession("a"));
        assertEquals("a", a.getSessionId());
        List<ServiceBusReceivedMessage> got = receiveExactly(a, 4);
        assertEquals(List.of("a/0", "a/1", "a/2", "a/3"), bodies(got));
        got.forEach(message -> assertEquals("a", message.getSessionId()));
        got.forEach(a::complete);
        assertNothingToReceive(a);

        ServiceBusReceiverClient b = closing(sessions("sess-order").acceptSession("b"));
        List<ServiceBusReceivedMessage> rest = receiveExactly(b, 4);
        assertEquals(List.of("b/0", "b/1", "b/2", "b/3"), bodies(rest));
        rest.forEach(b::complete);
    }

    @Test
    @Tag("smoke")
    void sessionStateIsKeptAcrossReceivers() {
        sender("sess-state").sendMessages(List.of(inSession("cart", 0), inSession("cart", 1)));
        byte[] state = "{\"step\":1}".getBytes(StandardCharsets.UTF_8);

        ServiceBusSessionReceiverClient sessions = sessions("sess-state");
        ServiceBusReceiverClient first = sessions.acceptSession("cart");
        assertNull(first.getSessionState(), "a new session has no state");
        OffsetDateTime lockedUntil = first.renewSessionLock();
        assertTrue(lockedUntil.isAfter(OffsetDateTime.now()), "session locked until " + lockedUntil);
        ServiceBusReceivedMessage message = receiveOne(first);
        assertEquals("cart/0", body(message));
        first.complete(message);
        first.setSessionState(state);
        assertArrayEquals(state, first.getSessionState());
        first.close();

        // A later receiver of the session reads the state back, and the message left behind. It
        // comes from another connection: the SDK names a session's link after the session, and
        // on the same connection it can hand back the link still closing instead of attaching a
        // new one (then the broker rightly answers session-lock-lost).
        ServiceBusReceiverClient second = acceptWhenFree("sess-state", "cart");
        assertArrayEquals(state, second.getSessionState());
        ServiceBusReceivedMessage next = receiveOne(second);
        assertEquals("cart/1", body(next));
        second.complete(next);
        second.setSessionState(null);
        assertNull(second.getSessionState(), "state cleared");
    }

    @Test
    void theNextAvailableSessionIsTheOneWithTheOldestMessage() {
        var sender = sender("sess-next");
        sender.sendMessage(inSession("older", 0));
        sender.sendMessage(inSession("newer", 0));
        ServiceBusSessionReceiverClient sessions = sessions("sess-next");

        ServiceBusReceiverClient first = closing(sessions.acceptNextSession());
        assertEquals("older", first.getSessionId());
        first.complete(receiveOne(first));

        // With "older" held, the next one is "newer".
        ServiceBusReceiverClient second = closing(sessions.acceptNextSession());
        assertEquals("newer", second.getSessionId());
        ServiceBusReceivedMessage message = receiveOne(second);
        assertEquals("newer/0", body(message));
        second.complete(message);
    }

    @Test
    void aSessionHeldByAnotherReceiverCannotBeLocked() {
        sender("sess-held").sendMessage(inSession("busy", 0));
        ServiceBusReceiverClient holder = closing(sessions("sess-held").acceptSession("busy"));

        // Another client (its own connection) asks for the same session.
        ServiceBusSessionReceiverClient other = closing(builder().sessionReceiver().queueName("sess-held").buildClient());
        // The sync session receiver surfaces the refusal as the AMQP error it is (not wrapped
        // in a ServiceBusException): com.microsoft:session-cannot-be-locked.
        AmqpException error = assertThrows(AmqpException.class, () -> closing(other.acceptSession("busy")));
        assertEquals(AmqpErrorCondition.SESSION_CANNOT_BE_LOCKED, error.getErrorCondition(), error::toString);

        holder.complete(receiveOne(holder));
    }

    @Test
    void theSessionProcessorKeepsEachSessionsOrder() {
        List<ServiceBusMessage> interleaved = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            for (String session : List.of("s1", "s2", "s3")) {
                interleaved.add(inSession(session, i));
            }
        }
        sender("sess-proc").sendMessages(interleaved);

        Map<String, List<String>> seen = new ConcurrentHashMap<>();
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        ServiceBusProcessorClient processor = connection().sessionProcessor()
            .queueName("sess-proc")
            .maxConcurrentSessions(2)
            // Two sessions at a time: a drained one is given up after a second without a
            // message (the default waits a try timeout) and the third is accepted.
            .sessionIdleTimeout(Duration.ofSeconds(1))
            .processMessage(context -> {
                ServiceBusReceivedMessage message = context.getMessage();
                seen.computeIfAbsent(message.getSessionId(), id -> new CopyOnWriteArrayList<>()).add(body(message));
            })
            .processError((ServiceBusErrorContext context) -> errors.add(context.getException()))
            .buildProcessorClient();
        closing(processor::close);
        processor.start();
        eventually(WAIT, () -> "15 messages from 3 sessions, saw " + seen,
            () -> seen.values().stream().mapToInt(List::size).sum() >= 15);
        processor.stop();

        for (String session : List.of("s1", "s2", "s3")) {
            List<String> expected = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                expected.add(session + "/" + i);
            }
            assertEquals(expected, seen.get(session), "session " + session + " in order, each once");
        }
        assertTrue(errors.isEmpty(), "processor errors: " + errors);
    }
}
