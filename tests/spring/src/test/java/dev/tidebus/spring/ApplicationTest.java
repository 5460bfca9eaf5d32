package dev.tidebus.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;

/**
 * The application against the real broker (tests/broker/spring.rs starts it and sets
 * TIDEBUS_CONNECTION_STRING): the processor the starter started on its own receives an order
 * the auto-configured sender placed. The retry settings here only make a broken broker fail
 * the test in seconds rather than after the SDK's minutes of retries.
 */
@SpringBootTest(properties = {
    "spring.cloud.azure.servicebus.retry.mode=fixed",
    "spring.cloud.azure.servicebus.retry.fixed.max-retries=1",
    "spring.cloud.azure.servicebus.retry.fixed.delay=1s",
    "spring.cloud.azure.servicebus.retry.try-timeout=10s",
})
class ApplicationTest {
    /** How long a sent order may take to come back. */
    private static final long RECEIVE_DEADLINE_S = 30;

    @Autowired
    Orders orders;

    @Autowired
    Inbox inbox;

    @Autowired
    ServiceBusProcessorClient processor;

    @Test
    void anOrderPlacedIsReceivedByTheProcessor() throws InterruptedException {
        assertNotNull(System.getenv("TIDEBUS_CONNECTION_STRING"),
                "TIDEBUS_CONNECTION_STRING is not set: run this through `cargo test` (tests/broker/spring.rs)");
        assertTrue(processor.isRunning(), "the starter did not start its processor");
        String order = "order " + UUID.randomUUID();
        orders.place(order);
        String got = inbox.received().poll(RECEIVE_DEADLINE_S, TimeUnit.SECONDS);
        assertEquals(order, got, "processor errors: " + inbox.errors());
        assertTrue(inbox.errors().isEmpty(), "processor errors: " + inbox.errors());
    }
}
