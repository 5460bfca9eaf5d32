package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.azure.core.amqp.AmqpRetryOptions;
import com.azure.core.http.HttpPipelineCallContext;
import com.azure.core.http.HttpPipelineNextPolicy;
import com.azure.core.http.HttpResponse;
import com.azure.core.http.policy.HttpPipelinePolicy;
import com.azure.core.util.UrlBuilder;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusException;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClientBuilder;
import com.azure.messaging.servicebus.models.ServiceBusReceiveMode;
import com.azure.messaging.servicebus.models.SubQueue;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.function.Executable;
import reactor.core.publisher.Mono;

/**
 * What every test class shares: the broker's connection strings (from run.sh), a client builder
 * per test whose clients are closed after it, and waits that poll a condition with a deadline.
 *
 * <p>Each test uses entities of its own (declared in entities.toml), so nothing a test leaves
 * behind reaches another.
 */
abstract class TidebusTest {
    /** The emulator connection string on the broker's ephemeral AMQP port. */
    static final String CONNECTION_STRING = required("TIDEBUS_CONNECTION_STRING");

    /** How long a test waits for something that should happen at once. */
    static final Duration WAIT = Duration.ofSeconds(20);

    /** How long a receive waits when a test checks that nothing (more) arrives. */
    static final Duration NOTHING_WAIT = Duration.ofSeconds(2);

    /**
     * Short try timeouts and one retry: a broker that does not answer fails the test in
     * seconds, not after the SDK's default of 3 tries of 60 s.
     */
    static final AmqpRetryOptions RETRY = new AmqpRetryOptions().setTryTimeout(Duration.ofSeconds(20))
        .setMaxRetries(1)
        .setDelay(Duration.ofMillis(200))
        .setMaxDelay(Duration.ofSeconds(1));

    private final Deque<AutoCloseable> opened = new ArrayDeque<>();
    private ServiceBusClientBuilder connection;

    static String required(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException(name + " is not set: run the suite through tests/java/run.sh");
        }
        return value;
    }

    /** A builder on the broker's connection string: clients built from one share a connection. */
    static ServiceBusClientBuilder builder() {
        return new ServiceBusClientBuilder().connectionString(CONNECTION_STRING).retryOptions(RETRY);
    }

    /**
     * This test's builder: the clients built from it share one AMQP connection (as a transaction
     * needs: its work goes over the connection that declared it).
     */
    ServiceBusClientBuilder connection() {
        if (connection == null) {
            connection = builder();
        }
        return connection;
    }

    /** Closes {@code client} after the test, before what was opened earlier. */
    <T extends AutoCloseable> T closing(T client) {
        opened.push(client);
        return client;
    }

    @AfterEach
    void closeClients() throws Exception {
        Exception first = null;
        while (!opened.isEmpty()) {
            try {
                opened.pop().close();
            } catch (Exception e) {
                if (first == null) {
                    first = e;
                }
            }
        }
        connection = null;
        if (first != null) {
            throw first;
        }
    }

    ServiceBusSenderClient sender(String queue) {
        return closing(connection().sender().queueName(queue).buildClient());
    }

    ServiceBusReceiverClient receiver(String queue) {
        return closing(connection().receiver().queueName(queue).buildClient());
    }

    ServiceBusReceiverClient receiver(String queue, ServiceBusReceiveMode mode) {
        return closing(connection().receiver().queueName(queue).receiveMode(mode).buildClient());
    }

    ServiceBusReceiverClient deadLetterReceiver(String queue) {
        return closing(connection().receiver().queueName(queue).subQueue(SubQueue.DEAD_LETTER_QUEUE).buildClient());
    }

    /**
     * The administration client over HTTPS (the trust store run.sh made holds the broker's CA).
     * The SDK keeps only the host of the endpoint and dials 443; a pipeline policy puts the
     * broker's administration port back into every request's URL.
     */
    static ServiceBusAdministrationClient administration() {
        int port = Integer.parseInt(required("TIDEBUS_ADMIN_PORT"));
        return new ServiceBusAdministrationClientBuilder().connectionString(required("TIDEBUS_ADMIN_CONNECTION_STRING"))
            .addPolicy(new PortPolicy(port))
            .buildClient();
    }

    /** Rewrites each request's URL to the given port. */
    static final class PortPolicy implements HttpPipelinePolicy {
        private final int port;

        PortPolicy(int port) {
            this.port = port;
        }

        @Override
        public Mono<HttpResponse> process(HttpPipelineCallContext context, HttpPipelineNextPolicy next) {
            UrlBuilder url = UrlBuilder.parse(context.getHttpRequest().getUrl());
            url.setPort(port);
            context.getHttpRequest().setUrl(url.toString());
            return next.process();
        }
    }

    static ServiceBusMessage text(String body) {
        return new ServiceBusMessage(body);
    }

    /** Messages {@code prefix-0} .. {@code prefix-(count-1)}, each with that text as message id. */
    static List<ServiceBusMessage> numbered(String prefix, int count) {
        List<ServiceBusMessage> messages = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            messages.add(new ServiceBusMessage(prefix + "-" + i).setMessageId(prefix + "-" + i));
        }
        return messages;
    }

    static String body(ServiceBusReceivedMessage message) {
        return message.getBody().toString();
    }

    static List<String> bodies(List<ServiceBusReceivedMessage> messages) {
        return messages.stream().map(TidebusTest::body).collect(Collectors.toList());
    }

    /** Receives until {@code count} messages came, failing after {@link #WAIT}. */
    static List<ServiceBusReceivedMessage> receiveExactly(ServiceBusReceiverClient receiver, int count) {
        List<ServiceBusReceivedMessage> got = new ArrayList<>();
        Instant deadline = Instant.now().plus(WAIT);
        while (got.size() < count && Instant.now().isBefore(deadline)) {
            receiver.receiveMessages(count - got.size(), Duration.ofSeconds(2)).forEach(got::add);
        }
        assertEquals(count, got.size(), "messages received from " + receiver.getEntityPath() + ": " + bodies(got));
        return got;
    }

    static ServiceBusReceivedMessage receiveOne(ServiceBusReceiverClient receiver) {
        return receiveExactly(receiver, 1).get(0);
    }

    /** Asserts that a receive of {@link #NOTHING_WAIT} gets nothing. */
    static void assertNothingToReceive(ServiceBusReceiverClient receiver) {
        List<ServiceBusReceivedMessage> got = new ArrayList<>();
        receiver.receiveMessages(1, NOTHING_WAIT).forEach(got::add);
        assertTrue(got.isEmpty(), "expected nothing from " + receiver.getEntityPath() + ", got " + bodies(got));
    }

    /** Asserts that the entity holds no message at all: none to receive, none to peek. */
    static void assertDrained(ServiceBusReceiverClient receiver) {
        assertNothingToReceive(receiver);
        ServiceBusReceivedMessage left = firstMessage(receiver);
        assertTrue(left == null, () -> receiver.getEntityPath() + " still holds " + body(left));
    }

    /**
     * The first message the entity holds (any state), by a peek from sequence number 0, or null.
     * (A bare {@code peekMessage()} goes on from the receiver's last peek, so it cannot tell.)
     */
    static ServiceBusReceivedMessage firstMessage(ServiceBusReceiverClient receiver) {
        return receiver.peekMessage(0);
    }

    /** Polls {@code condition} every 100 ms until it holds, failing after {@code timeout}. */
    static void eventually(Duration timeout, String what, BooleanSupplier condition) {
        eventually(timeout, () -> what, condition);
    }

    /** {@link #eventually(Duration, String, BooleanSupplier)} describing the wait when it failed. */
    static void eventually(Duration timeout, Supplier<String> what, BooleanSupplier condition) {
        Instant deadline = Instant.now().plus(timeout);
        while (!condition.getAsBoolean()) {
            if (Instant.now().isAfter(deadline)) {
                fail("not within " + timeout + ": " + what.get());
            }
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                fail("interrupted waiting for " + what.get());
            }
        }
    }

    /** Waits until the wall clock is past {@code instant} (a lock's end, a schedule's time). */
    static void waitUntilPast(Instant instant, Duration margin) {
        Instant until = instant.plus(margin);
        eventually(Duration.between(Instant.now(), until).plusSeconds(5), "the clock to pass " + until,
            () -> Instant.now().isAfter(until));
    }

    /** Runs {@code action}, which must throw a {@link ServiceBusException}; returns it. */
    static ServiceBusException serviceBusError(Executable action) {
        try {
            action.execute();
        } catch (ServiceBusException e) {
            return e;
        } catch (Throwable e) {
            for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
                if (cause instanceof ServiceBusException) {
                    return (ServiceBusException) cause;
                }
            }
            throw new AssertionError("expected a ServiceBusException, got " + e, e);
        }
        throw new AssertionError("expected a ServiceBusException, nothing was thrown");
    }

    static void assertReason(ServiceBusFailureReason expected, ServiceBusException error) {
        assertEquals(expected, error.getReason(), () -> "failure reason of " + error);
    }
}
