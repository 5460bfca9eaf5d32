package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.exception.ResourceExistsException;
import com.azure.core.exception.ResourceNotFoundException;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import com.azure.messaging.servicebus.administration.models.CreateRuleOptions;
import com.azure.messaging.servicebus.administration.models.CreateSubscriptionOptions;
import com.azure.messaging.servicebus.administration.models.MessagingSku;
import com.azure.messaging.servicebus.administration.models.QueueProperties;
import com.azure.messaging.servicebus.administration.models.QueueRuntimeProperties;
import com.azure.messaging.servicebus.administration.models.RuleProperties;
import com.azure.messaging.servicebus.administration.models.SqlRuleFilter;
import com.azure.messaging.servicebus.administration.models.SubscriptionProperties;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The administration client over HTTPS (Service Bus's ATOM management API): queues, topics,
 * subscriptions and rules created, read, updated and deleted; runtime counts; the namespace.
 */
class AdministrationTest extends TidebusTest {
    private final ServiceBusAdministrationClient admin = administration();

    @Test
    @Tag("smoke")
    void aQueueIsCreatedReadUpdatedUsedAndDeleted() {
        QueueProperties created = admin.createQueue("admin-made", new CreateQueueOptions().setMaxDeliveryCount(4)
            .setLockDuration(Duration.ofSeconds(30))
            .setDefaultMessageTimeToLive(Duration.ofHours(1)));
        assertEquals("admin-made", created.getName());
        assertEquals(4, created.getMaxDeliveryCount());
        assertEquals(Duration.ofSeconds(30), created.getLockDuration());
        assertThrows(ResourceExistsException.class, () -> admin.createQueue("admin-made"));

        QueueProperties read = admin.getQueue("admin-made");
        assertEquals(Duration.ofHours(1), read.getDefaultMessageTimeToLive());
        read.setMaxDeliveryCount(6);
        admin.updateQueue(read);
        QueueProperties updated = admin.getQueue("admin-made");
        assertEquals(6, updated.getMaxDeliveryCount());
        assertEquals(Duration.ofSeconds(30), updated.getLockDuration(), "an update keeps what it did not change");
        assertTrue(admin.getQueueExists("admin-made"));
        List<String> names = new ArrayList<>();
        admin.listQueues().forEach(queue -> names.add(queue.getName()));
        assertTrue(names.containsAll(List.of("admin-made", "admin-counts", "send-one")), "listed: " + names);

        // The created queue works over AMQP with its settings.
        sender("admin-made").sendMessage(text("to the new queue"));
        ServiceBusReceiverClient receiver = receiver("admin-made");
        ServiceBusReceivedMessage got = receiveOne(receiver);
        assertEquals("to the new queue", body(got));
        receiver.complete(got);

        admin.deleteQueue("admin-made");
        assertFalse(admin.getQueueExists("admin-made"));
        assertThrows(ResourceNotFoundException.class, () -> admin.getQueue("admin-made"));
        assertThrows(ResourceNotFoundException.class, () -> admin.deleteQueue("admin-made"));
    }

    @Test
    void aTopicWithASubscriptionAndRulesIsManaged() {
        admin.createTopic("admin-topic");
        SubscriptionProperties subscription = admin.createSubscription("admin-topic", "audit",
            new CreateSubscriptionOptions().setMaxDeliveryCount(3));
        assertEquals(3, subscription.getMaxDeliveryCount());
        assertEquals("audit", admin.getSubscription("admin-topic", "audit").getSubscriptionName());

        // The synchronous client's createRule takes the rule's name before the subscription's.
        String topic = "admin-topic";
        String rule = "red";
        String subscriptionName = "audit";
        RuleProperties red = admin.createRule(topic, rule, subscriptionName,
            new CreateRuleOptions(new SqlRuleFilter("color = 'red'")));
        assertEquals("red", red.getName());
        assertThrows(ResourceExistsException.class, () -> admin.createRule(topic, rule, subscriptionName,
            new CreateRuleOptions(new SqlRuleFilter("1 = 1"))));
        List<String> rules = new ArrayList<>();
        admin.listRules(topic, subscriptionName).forEach(listed -> rules.add(listed.getName()));
        assertEquals(List.of("$Default", "red"), rules);

        RuleProperties read = admin.getRule(topic, subscriptionName, "red");
        assertEquals("color = 'red'", assertInstanceOf(SqlRuleFilter.class, read.getFilter()).getSqlExpression());
        read.setFilter(new SqlRuleFilter("color = 'blue'"));
        admin.updateRule(topic, subscriptionName, read);
        assertEquals("color = 'blue'", assertInstanceOf(SqlRuleFilter.class,
            admin.getRule(topic, subscriptionName, "red").getFilter()).getSqlExpression());
        admin.deleteRule(topic, subscriptionName, "red");
        assertThrows(ResourceNotFoundException.class, () -> admin.getRule(topic, subscriptionName, "red"));

        assertEquals(0, admin.getSubscriptionRuntimeProperties(topic, subscriptionName).getActiveMessageCount());
        admin.deleteSubscription(topic, subscriptionName);
        assertFalse(admin.getSubscriptionExists(topic, subscriptionName));
        admin.deleteTopic(topic);
        assertFalse(admin.getTopicExists(topic));
    }

    @Test
    void runtimePropertiesCountEachState() {
        var sender = sender("admin-counts");
        sender.sendMessages(numbered("counted", 3));
        sender.scheduleMessage(text("later"), OffsetDateTime.now().plusHours(1));
        ServiceBusReceiverClient receiver = receiver("admin-counts");
        receiver.deadLetter(receiveOne(receiver), new DeadLetterOptions().setDeadLetterReason("Counted"));

        QueueRuntimeProperties counts = admin.getQueueRuntimeProperties("admin-counts");
        assertEquals(2, counts.getActiveMessageCount(), "active");
        assertEquals(1, counts.getDeadLetterMessageCount(), "dead-lettered");
        assertEquals(1, counts.getScheduledMessageCount(), "scheduled");
        assertEquals(0, counts.getTransferMessageCount(), "transfers");
        assertTrue(counts.getSizeInBytes() > 0, "size " + counts.getSizeInBytes());
    }

    /** Entities created at run time serve the SDK's clients: a session queue and a topic's subscription. */
    @Test
    void createdEntitiesServeSessionsAndCopies() {
        admin.createQueue("admin-sessions", new CreateQueueOptions().setSessionRequired(true));
        assertTrue(admin.getQueue("admin-sessions").isSessionRequired());
        sender("admin-sessions").sendMessage(text("in a session").setSessionId("s"));
        ServiceBusReceiverClient session = closing(
            closing(connection().sessionReceiver().queueName("admin-sessions").buildClient()).acceptSession("s"));
        session.complete(receiveOne(session));

        admin.createTopic("admin-flow");
        admin.createSubscription("admin-flow", "copies");
        closing(connection().sender().topicName("admin-flow").buildClient()).sendMessages(numbered("copy", 2));
        eventually(WAIT, "two copies counted in the subscription",
            () -> admin.getSubscriptionRuntimeProperties("admin-flow", "copies").getActiveMessageCount() == 2);
        assertEquals(1, admin.getTopicRuntimeProperties("admin-flow").getSubscriptionCount());
        ServiceBusReceiverClient copies = closing(
            connection().receiver().topicName("admin-flow").subscriptionName("copies").buildClient());
        assertEquals(List.of("copy-0", "copy-1"), bodies(receiveExactly(copies, 2)));

        admin.deleteTopic("admin-flow");
        admin.deleteQueue("admin-sessions");
    }

    @Test
    void theNamespaceIsStandard() {
        assertEquals(MessagingSku.STANDARD, admin.getNamespaceProperties().getMessagingSku());
    }
}
