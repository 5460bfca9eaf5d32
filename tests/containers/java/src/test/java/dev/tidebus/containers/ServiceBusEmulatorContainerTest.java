package dev.tidebus.containers;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.testcontainers.azure.ServiceBusEmulatorContainer;
import org.testcontainers.images.builder.Transferable;
import org.testcontainers.utility.DockerImageName;

/**
 * The README's recipe: Testcontainers' {@code ServiceBusEmulatorContainer} on the Tidebus
 * image (named by {@code TIDEBUS_IMAGE}), given an emulator {@code Config.json} with
 * {@code withConfig}, and reached with {@code getConnectionString()} by the official SDK.
 *
 * <p>The module refuses to start without a SQL Server container
 * ({@code withMsSqlServerContainer}), which Tidebus does not use. Its {@code configure()} only
 * checks for one, passes its address and password on, and accepts the licence if asked to:
 * overridden to do nothing, no SQL Server image is needed ({@code acceptLicense()} still sets
 * {@code ACCEPT_EULA}).
 */
class ServiceBusEmulatorContainerTest {
    private static final String EMULATOR = "mcr.microsoft.com/azure-messaging/servicebus-emulator";
    private static final String READY_LINE = "Emulator Service is Successfully Up!";
    private static final Duration RECEIVE_DEADLINE = Duration.ofSeconds(30);
    private static final String QUEUE = "tc.java.queue";
    private static final String CONFIG = """
            {
              "UserConfig": {
                "Namespaces": [{
                  "Name": "sbemulatorns",
                  "Queues": [{"Name": "tc.java.queue", "Properties": {"MaxDeliveryCount": 3}}],
                  "Topics": []
                }],
                "Logging": {"Type": "File"}
              }
            }
            """;

    private static DockerImageName image() {
        String image = System.getenv("TIDEBUS_IMAGE");
        assertNotNull(image, "TIDEBUS_IMAGE is not set: run this through `cargo test` (tests/broker/containers.rs)");
        return DockerImageName.parse(image).asCompatibleSubstituteFor(EMULATOR);
    }

    @Test
    void theModuleStartsTheImageWithAConfigAndTheSdkSendsAndReceives() {
        try (ServiceBusEmulatorContainer emulator = new ServiceBusEmulatorContainer(image()) {
                    @Override
                    protected void configure() {
                        // Tidebus needs no SQL Server container.
                    }
                }.acceptLicense().withConfig(Transferable.of(CONFIG))) {
            emulator.start();
            String logs = emulator.getLogs();
            assertTrue(logs.contains(READY_LINE), "started before the ready line:\n" + logs);
            assertTrue(logs.contains("ACCEPT_EULA"), "the module's ACCEPT_EULA was not seen:\n" + logs);

            String connection = emulator.getConnectionString();
            System.out.println("connection string: " + connection);
            String body = "through Testcontainers' ServiceBusEmulatorContainer";
            ServiceBusClientBuilder builder = new ServiceBusClientBuilder().connectionString(connection);
            // QUEUE is declared by CONFIG alone: the image's embedded default has no such queue.
            try (ServiceBusSenderClient sender = builder.sender().queueName(QUEUE).buildClient()) {
                sender.sendMessage(new ServiceBusMessage(body));
            }
            try (ServiceBusReceiverClient receiver = builder.receiver().queueName(QUEUE).buildClient()) {
                List<ServiceBusReceivedMessage> got = new ArrayList<>();
                Instant deadline = Instant.now().plus(RECEIVE_DEADLINE);
                while (got.isEmpty() && Instant.now().isBefore(deadline)) {
                    receiver.receiveMessages(1, Duration.ofSeconds(1)).forEach(got::add);
                }
                assertEquals(1, got.size(), "nothing received within " + RECEIVE_DEADLINE);
                assertEquals(body, got.get(0).getBody().toString());
                receiver.complete(got.get(0));
            }
        }
    }

    /**
     * Why the recipe overrides {@code configure()}: as the module stands, it fails before any
     * container starts. Should a version drop the demand, this fails and the README's recipe
     * can lose the override.
     */
    @Test
    void withoutTheOverrideTheModuleDemandsASqlServerContainer() {
        try (ServiceBusEmulatorContainer emulator = new ServiceBusEmulatorContainer(image()).acceptLicense()) {
            RuntimeException refused = assertThrows(RuntimeException.class, emulator::start);
            StringBuilder causes = new StringBuilder();
            for (Throwable cause = refused; cause != null; cause = cause.getCause()) {
                causes.append(cause).append('\n');
            }
            assertTrue(causes.toString().contains("requires a Microsoft SQL Server container"), causes.toString());
        }
    }
}
