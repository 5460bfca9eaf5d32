package dev.tidebus.sdk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.azure.messaging.servicebus.ServiceBusException;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusRuleManagerClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.administration.models.CorrelationRuleFilter;
import com.azure.messaging.servicebus.administration.models.CreateRuleOptions;
import com.azure.messaging.servicebus.administration.models.RuleProperties;
import com.azure.messaging.servicebus.administration.models.SqlRuleAction;
import com.azure.messaging.servicebus.administration.models.SqlRuleFilter;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The rule manager (a subscription's rules over AMQP: add-rule, enumerate-rules, remove-rule) on
 * topic `rules`, and the copies the rules route: subscription `filtered` gets the test's rules,
 * `all` keeps `$Default`.
 */
class RuleManagerTest extends TidebusTest {
    private ServiceBusRuleManagerClient rules(String subscription) {
        return closing(connection().ruleManager().topicName("rules").subscriptionName(subscription).buildClient());
    }

    private ServiceBusReceiverClient subscriptionReceiver(String subscription) {
        return closing(connection().receiver().topicName("rules").subscriptionName(subscription).buildClient());
    }

    private static ServiceBusMessage message(String id, String subject, Map<String, Object> properties) {
        ServiceBusMessage message = new ServiceBusMessage(id).setMessageId(id).setSubject(subject);
        message.getApplicationProperties().putAll(properties);
        return message;
    }

    private static List<String> ruleNames(ServiceBusRuleManagerClient manager) {
        List<String> names = new ArrayList<>();
        manager.listRules().forEach(rule -> names.add(rule.getName()));
        return names;
    }

    @Test
    void rulesCreatedListedAndDeletedRouteTheCopies() {
        ServiceBusRuleManagerClient filtered = rules("filtered");
        filtered.deleteRule("$Default");
        filtered.createRule("red", new CreateRuleOptions(new SqlRuleFilter("color = 'red'"))
            .setAction(new SqlRuleAction("SET picked = 'by-sql'")));
        CorrelationRuleFilter vip = new CorrelationRuleFilter().setLabel("vip");
        vip.getProperties().put("tier", "gold");
        filtered.createRule("vip", new CreateRuleOptions(vip));

        List<RuleProperties> listed = new ArrayList<>();
        filtered.listRules().forEach(listed::add);
        listed.sort(Comparator.comparing(RuleProperties::getName));
        assertEquals(List.of("red", "vip"), listed.stream().map(RuleProperties::getName).toList());
        SqlRuleFilter red = assertInstanceOf(SqlRuleFilter.class, listed.get(0).getFilter());
        assertEquals("color = 'red'", red.getSqlExpression());
        assertEquals("SET picked = 'by-sql'",
            assertInstanceOf(SqlRuleAction.class, listed.get(0).getAction()).getSqlExpression());
        CorrelationRuleFilter readBack = assertInstanceOf(CorrelationRuleFilter.class, listed.get(1).getFilter());
        assertEquals("vip", readBack.getLabel());
        assertEquals("gold", readBack.getProperties().get("tier"));

        ServiceBusSenderClient sender = closing(connection().sender().topicName("rules").buildClient());
        sender.sendMessages(List.of(
            message("red-one", "plain", Map.of("color", "red")),
            message("blue-one", "plain", Map.of("color", "blue")),
            message("gold-vip", "vip", Map.of("tier", "gold")),
            message("silver-vip", "vip", Map.of("tier", "silver"))));

        ServiceBusReceiverClient picked = subscriptionReceiver("filtered");
        List<ServiceBusReceivedMessage> copies = receiveExactly(picked, 2);
        assertEquals(List.of("red-one", "gold-vip"), copies.stream().map(ServiceBusReceivedMessage::getMessageId).toList());
        assertEquals("by-sql", copies.get(0).getApplicationProperties().get("picked"), "the SQL action shaped the copy");
        assertNull(copies.get(1).getApplicationProperties().get("picked"), "no action on the correlation rule");
        copies.forEach(picked::complete);
        assertNothingToReceive(picked);

        // Without the SQL rule a red message reaches only `all`.
        filtered.deleteRule("red");
        assertEquals(List.of("vip"), ruleNames(filtered));
        sender.sendMessage(message("red-two", "plain", Map.of("color", "red")));
        assertNothingToReceive(picked);

        ServiceBusReceiverClient everything = subscriptionReceiver("all");
        List<ServiceBusReceivedMessage> all = receiveExactly(everything, 5);
        assertEquals(List.of("red-one", "blue-one", "gold-vip", "silver-vip", "red-two"),
            all.stream().map(ServiceBusReceivedMessage::getMessageId).toList());
        all.forEach(everything::complete);
    }

    @Test
    void aTakenNameAndAMissingRuleAreRefused() {
        ServiceBusRuleManagerClient dupes = rules("dupes");
        dupes.createRule("twice", new CreateRuleOptions(new SqlRuleFilter("1 = 1")));
        // Rule names compare ignoring case, as in Service Bus.
        ServiceBusException taken = serviceBusError(
            () -> dupes.createRule("TWICE", new CreateRuleOptions(new SqlRuleFilter("1 = 1"))));
        assertReason(ServiceBusFailureReason.MESSAGING_ENTITY_ALREADY_EXISTS, taken);

        ServiceBusException missing = serviceBusError(() -> dupes.deleteRule("never-made"));
        assertReason(ServiceBusFailureReason.MESSAGING_ENTITY_NOT_FOUND, missing);

        dupes.deleteRule("twice");
        assertEquals(List.of("$Default"), ruleNames(dupes));
    }
}
