"use strict";
// Topics against @azure/service-bus: rules managed at run time through the SDK's rule manager
// (`com.microsoft:add-rule`, `remove-rule`, `enumerate-rules` on the subscription's management
// node), SQL and correlation filters picking the copies, actions shaping them, and a
// subscription's own dead-letter queue; the JavaScript side of tests/python/test_topics.py.

const assert = require("node:assert/strict");

const Long = require("long"); // the SDK's own sequence-number type

const { brokerTest, ids, receiveExactly, send, withReceiver } = require("./common");

const TOPIC = { name: "t1", subscriptions: ["s1", "s2"] };

/**
 * Every message a subscription holds, peeked in order from 1 (otherwise the SDK resumes after
 * the last message an earlier peek on the same entity saw).
 */
function peekAll(client, topic, subscription, options = {}) {
  return withReceiver(client, `${topic}/Subscriptions/${subscription}`, options, (receiver) =>
    receiver.peekMessages(100, { fromSequenceNumber: Long.ONE }),
  );
}

async function listRules(rules) {
  const listed = [];
  for await (const rule of rules.listRules()) listed.push(rule);
  return listed;
}

brokerTest(
  "rules are created, listed and deleted at run time and pick each subscription's copies",
  { topics: [TOPIC] },
  async ({ client }) => {
    const rules = client.createRuleManager("t1", "s1");
    assert.deepEqual((await listRules(rules)).map((rule) => rule.name), ["$Default"]);
    await rules.deleteRule("$Default");
    await rules.createRule("red", { sqlExpression: "color = 'red'" }, { sqlExpression: "SET seen = 'yes'" });
    await rules.createRule("vip", { subject: "vip", applicationProperties: { tier: "gold" } });

    const listed = await listRules(rules);
    assert.deepEqual(listed.map((rule) => rule.name), ["red", "vip"]);
    assert.equal(listed[0].filter.sqlExpression, "color = 'red'");
    assert.equal(listed[0].action.sqlExpression, "SET seen = 'yes'");
    assert.equal(listed[1].filter.subject, "vip");
    assert.deepEqual(listed[1].filter.applicationProperties, { tier: "gold" });
    await assert.rejects(rules.createRule("RED", { sqlExpression: "1=1" }), (error) => {
      assert.equal(error.code, "MessagingEntityAlreadyExists", String(error));
      return true;
    });
    await assert.rejects(rules.createRule("bad", { sqlExpression: "color = " }), /sql-filter/);

    const message = (id, properties, subject) => ({
      body: id,
      messageId: id,
      subject,
      applicationProperties: properties,
    });
    await send(client, "t1", [
      message("red", { color: "red" }),
      message("blue", { color: "blue" }),
      message("gold", { tier: "gold" }, "vip"),
      message("silver", { tier: "silver" }, "vip"),
    ]);
    const s1 = await peekAll(client, "t1", "s1");
    assert.deepEqual(ids(s1), ["red", "gold"]);
    assert.deepEqual({ ...s1[0].applicationProperties }, { color: "red", seen: "yes", RuleName: "red" });
    assert.deepEqual(ids(await peekAll(client, "t1", "s2")), ["red", "blue", "gold", "silver"]);

    await rules.deleteRule("red");
    await assert.rejects(rules.deleteRule("red"), (error) => {
      assert.equal(error.code, "MessagingEntityNotFound", String(error));
      return true;
    });
    await send(client, "t1", [message("red-again", { color: "red" })]);
    assert.deepEqual(ids(await peekAll(client, "t1", "s1")), ["red", "gold"], "the rule is gone");
  },
);

brokerTest(
  "rules are listed by name, page by page, and a name taken is refused in Service Bus's words",
  { topics: [TOPIC] },
  async ({ client }) => {
    // The SDK's own suite (ruleManager.spec.ts, "list rules by page"): created after sqlRule,
    // correlationRule comes before it, as Service Bus orders rules by name.
    const rules = client.createRuleManager("t1", "s1");
    await rules.createRule("sqlRule", { sqlExpression: "price > 10" });
    await rules.createRule("correlationRule", { correlationId: "correlationId" });
    const pages = [];
    for await (const page of rules.listRules().byPage({ maxPageSize: 1 })) {
      pages.push(page.map((rule) => rule.name));
    }
    // 7.9.5's rule manager ends the pages at the first empty one.
    assert.deepEqual(pages, [["$Default"], ["correlationRule"], ["sqlRule"]]);
    assert.deepEqual(
      (await listRules(rules)).map((rule) => rule.name),
      ["$Default", "correlationRule", "sqlRule"],
    );

    // "throws if add rule with same name twice": the rule's path as Service Bus words it,
    // `<namespace>:Topic:<topic>|<subscription>|<rule>`.
    await rules.createRule("ruleName", { subject: "yellow" });
    await assert.rejects(rules.createRule("ruleName", { subject: "red" }), (error) => {
      assert.equal(error.code, "MessagingEntityAlreadyExists", String(error));
      assert.match(error.message, /The messaging entity '.*ruleName' already exists\./);
      assert.ok(
        error.message.startsWith("The messaging entity 'tidebus:Topic:t1|s1|ruleName' already exists."),
        error.message,
      );
      return true;
    });
  },
);

brokerTest(
  "a subscription dead-letters its own copy after max delivery count; the other keeps its",
  { topics: [{ name: "t1", subscriptions: [{ name: "s1", max_delivery_count: 2 }, "s2"] }] },
  async ({ client }) => {
    await send(client, "t1", [{ body: "x", messageId: "limit" }]);
    await withReceiver(client, "t1/Subscriptions/s1", async (receiver) => {
      for (let attempt = 0; attempt < 2; attempt++) {
        const [message] = await receiveExactly(receiver, 1);
        assert.equal(message.deliveryCount, attempt);
        await receiver.abandonMessage(message);
      }
    });
    const dead = await withReceiver(
      client,
      "t1/Subscriptions/s1",
      { subQueueType: "deadLetter" },
      async (receiver) => {
        const [message] = await receiveExactly(receiver, 1);
        await receiver.completeMessage(message);
        return message;
      },
    );
    assert.equal(dead.messageId, "limit");
    assert.equal(dead.deadLetterReason, "MaxDeliveryCountExceeded");
    assert.deepEqual(ids(await peekAll(client, "t1", "s2")), ["limit"]);
    assert.deepEqual(ids(await peekAll(client, "t1", "s1")), []);
  },
);
