"use strict";
// The administration endpoint through @azure/service-bus's `ServiceBusAdministrationClient`,
// over HTTPS trusting a `tidebus gen-cert` CA through NODE_EXTRA_CA_CERTS (read when Node.js
// starts, so the client runs in a child process); the JavaScript side of
// tests/python/test_admin.py.

const assert = require("node:assert/strict");
const { execFile, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const { brokerTest, numbered, receiveExactly, send } = require("./common");

const CHILD_DEADLINE_MS = 60_000;

// Creates a queue, updates it, forwards, sets authorization rules, reads a queue's runtime
// counts after two sends, lists, refuses a second create and a missing queue, manages a
// subscription's rules, deletes; prints what it saw as JSON.
const ADMIN_CLIENT = `
const { ServiceBusAdministrationClient } = require("@azure/service-bus");
(async () => {
  const client = new ServiceBusAdministrationClient(process.env.CONNECTION_STRING);
  const seen = {};
  const created = await client.createQueue("made", { maxDeliveryCount: 4, lockDuration: "PT30S" });
  seen.created = [created.name, created.maxDeliveryCount, created.lockDuration];
  seen.exists = await client.createQueue("made").then(() => "created twice", (e) => e.code);
  const queue = await client.getQueue("made");
  queue.maxDeliveryCount = 6;
  queue.defaultMessageTimeToLive = "PT2H";
  await client.updateQueue(queue);
  const updated = await client.getQueue("made");
  seen.updated = [updated.maxDeliveryCount, updated.defaultMessageTimeToLive, updated.lockDuration];
  const express = await client.createTopic("express-events", { enableExpress: true });
  const createdExpress = express.enableExpress;
  seen.ordering = [express.supportOrdering];
  express.enableExpress = false;
  express.supportOrdering = false;
  await client.updateTopic(express);
  seen.ordering.push((await client.getTopic("express-events")).supportOrdering);
  updated.enableExpress = true;
  updated.enableBatchedOperations = false;
  await client.updateQueue(updated);
  seen.batched = (await client.getQueue("made")).enableBatchedOperations;
  seen.express = [createdExpress, (await client.getTopic("express-events")).enableExpress,
    (await client.getQueue("made")).enableExpress, (await client.getQueue("declared")).enableExpress];
  await client.deleteTopic("express-events");
  await client.createQueue("forwarding", { forwardTo: "declared" });
  const forwarding = await client.getQueue("forwarding");
  await client.updateQueue(forwarding);
  seen.forwardTo = [forwarding.forwardTo, (await client.getQueue("forwarding")).forwardTo];
  forwarding.forwardTo = "forwarding";
  await client.updateQueue(forwarding);
  seen.forwardTo.push((await client.getQueue("forwarding")).forwardTo);
  forwarding.forwardTo = undefined;
  await client.updateQueue(forwarding);
  seen.forwardTo.push((await client.getQueue("forwarding")).forwardTo ?? "none");
  await client.deleteQueue("forwarding");
  const writer = { claimType: "SharedAccessKey", keyName: "writer", accessRights: ["Send", "Listen"],
    primaryKey: "writer-primary-key", secondaryKey: "writer-secondary-key" };
  await client.createQueue("guarded", { authorizationRules: [writer] });
  const guarded = await client.getQueue("guarded");
  seen.authorizationRules = guarded.authorizationRules.map((rule) =>
    [rule.keyName, rule.accessRights, rule.primaryKey, rule.secondaryKey]);
  guarded.authorizationRules = [{ claimType: "SharedAccessKey", keyName: "reader", accessRights: ["Listen"] }];
  await client.updateQueue(guarded);
  const [made] = (await client.getQueue("guarded")).authorizationRules;
  seen.madeRule = [made.keyName, made.accessRights, Buffer.from(made.primaryKey, "base64").length];
  await client.deleteQueue("guarded");
  seen.missing = await client.getQueue("nothing").then(() => "found", (e) => e.code);
  const names = [];
  for await (const queue of client.listQueues()) names.push(queue.name);
  seen.names = names.sort();
  const runtime = await client.getQueueRuntimeProperties("declared");
  seen.runtime = [runtime.name, runtime.activeMessageCount, runtime.totalMessageCount];
  seen.namespace = (await client.getNamespaceProperties()).messagingSku;
  await client.createRule("events", "all", "red", { sqlExpression: "color = 'red'" },
    { sqlExpression: "SET picked = 'yes'" });
  await client.createRule("events", "all", "vip", { subject: "vip", applicationProperties: { tier: "gold" } });
  const red = await client.getRule("events", "all", "red");
  const vip = await client.getRule("events", "all", "vip");
  seen.rules = [red.filter.sqlExpression, red.action.sqlExpression, vip.filter.subject,
    vip.filter.applicationProperties.tier];
  const when = new Date(Date.UTC(2020, 6, 5, 11, 12, 13));
  await client.createRule("events", "all", "typed",
    { sqlExpression: "color = @color AND size > @size", sqlParameters: { "@color": "red", "@size": 2 } },
    { sqlExpression: "SET stamped = @when", sqlParameters: { "@when": when } });
  await client.createRule("events", "all", "timed", { applicationProperties: { at: when } });
  const typed = await client.getRule("events", "all", "typed");
  const timed = await client.getRule("events", "all", "timed");
  seen.parameters = [typed.filter.sqlParameters, typed.action.sqlParameters["@when"].getTime(),
    timed.filter.applicationProperties.at.getTime() === when.getTime()];
  await client.deleteRule("events", "all", "typed");
  await client.deleteRule("events", "all", "timed");
  const ruleNames = [];
  for await (const rule of client.listRules("events", "all")) ruleNames.push(rule.name);
  seen.ruleNames = ruleNames.sort();
  seen.ruleExists = await client.createRule("events", "all", "RED", { sqlExpression: "1=1" })
    .then(() => "created twice", (e) => e.code);
  await client.deleteRule("events", "all", "red");
  seen.ruleGone = await client.ruleExists("events", "all", "red");
  await client.createSubscription("events", "made", { maxDeliveryCount: 3 });
  seen.madeSubscription = (await client.getSubscription("events", "made")).maxDeliveryCount;
  await client.deleteSubscription("events", "made");
  seen.subscriptionGone = await client.subscriptionExists("events", "made");
  const subscription = await client.getSubscription("events", "all");
  seen.subscription = [subscription.subscriptionName, subscription.topicName, subscription.maxDeliveryCount];
  await client.deleteQueue("made");
  seen.deleted = await client.queueExists("made");
  const old = new ServiceBusAdministrationClient(process.env.CONNECTION_STRING, { serviceVersion: "2017-04" });
  seen.oldVersion = [(await old.createQueue("plain-2017")).name,
    await old.createQueue("sized-2017", { maxMessageSizeInKilobytes: 1024 })
      .then(() => "created", (e) => e.statusCode)];
  console.log(JSON.stringify(seen));
})().catch((error) => { console.error(error.code, error.message); process.exit(1); });
`;

function runAdmin(env, script = ADMIN_CLIENT) {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["-e", script],
      { env: { ...process.env, TZ: "UTC", ...env }, timeout: CHILD_DEADLINE_MS },
      (error, stdout, stderr) => resolve({ code: error ? error.code ?? error.signal : 0, stdout, stderr }),
    );
  });
}

const certificates = fs.mkdtempSync(path.join(os.tmpdir(), "tidebus-js-admin-"));
execFileSync(process.env.TIDEBUS_BIN, ["gen-cert", "--host", "localhost", "--out", certificates]);

// The broker of these tests: anonymous clients refused, the administration endpoint over
// HTTPS with the `gen-cert` CA, a declared queue and a topic with one subscription.
const SECURED = {
  queues: ["declared"],
  topics: [{ name: "events", subscriptions: ["all"] }],
  settings: {
    allow_anonymous: false,
    tls: {
      listen: "127.0.0.1:0",
      cert: path.join(certificates, "server.pem"),
      key: path.join(certificates, "server-key.pem"),
    },
  },
};

brokerTest(
  "the administration client creates, updates, describes, counts, lists and deletes over HTTPS",
  SECURED,
  async ({ broker, client }) => {
    assert.ok(broker.adminPort, "the ready file names the administration endpoint");
    await send(client, "declared", [numbered("count", 0), numbered("count", 1)]);
    const outcome = await runAdmin({
      CONNECTION_STRING:
        `Endpoint=sb://localhost:${broker.adminPort}/;` +
        "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE",
      NODE_EXTRA_CA_CERTS: path.join(certificates, "ca.pem"),
    });
    assert.equal(outcome.code, 0, outcome.stderr);
    const seen = JSON.parse(outcome.stdout.trim().split("\n").pop());
    assert.deepEqual(seen.created, ["made", 4, "PT30S"]);
    assert.equal(seen.exists, "MessageEntityAlreadyExistsError");
    assert.deepEqual(seen.updated, [6, "PT2H", "PT30S"]);
    // Created express, updated to not; a queue updated to express; a declared one is not.
    assert.deepEqual(seen.express, [true, false, true, false]);
    assert.deepEqual(seen.ordering, [true, false], "SupportOrdering kept as set");
    assert.equal(seen.batched, false, "EnableBatchedOperations kept as set");
    // Read back as Service Bus writes it (the full address), and taken back so.
    const address = `sb://localhost:${broker.adminPort}/declared`;
    // Forwarding to itself is allowed, as in Service Bus (each message is bounded at 4 moves).
    const itself = `sb://localhost:${broker.adminPort}/forwarding`;
    assert.deepEqual(seen.forwardTo, [address, address, itself, "none"]);
    // Authorization rules are the entity's policies, read back with their keys; an update
    // replaces them, and a key left out is made (32 random bytes, as Service Bus makes them).
    assert.deepEqual(seen.authorizationRules,
      [["writer", ["Send", "Listen"], "writer-primary-key", "writer-secondary-key"]]);
    assert.deepEqual(seen.madeRule, ["reader", ["Listen"], 32]);
    assert.equal(seen.missing, "MessageEntityNotFoundError");
    assert.deepEqual(seen.names, ["declared", "made"]);
    assert.deepEqual(seen.runtime, ["declared", 2, 2]);
    assert.equal(seen.namespace, "Standard");
    assert.deepEqual(seen.rules, ["color = 'red'", "SET picked = 'yes'", "vip", "gold"]);
    // SQL parameters and dateTime values read back (times are written without a zone, as
    // .NET writes a time given without one: the child runs in UTC, where Node reads them so).
    assert.deepEqual(seen.parameters, [{ "@color": "red", "@size": 2 }, Date.UTC(2020, 6, 5, 11, 12, 13), true]);
    assert.deepEqual(seen.ruleNames, ["$Default", "red", "vip"]);
    assert.equal(seen.ruleExists, "MessageEntityAlreadyExistsError");
    assert.equal(seen.ruleGone, false);
    assert.deepEqual(seen.subscription, ["all", "events", 10]);
    assert.equal(seen.madeSubscription, 3);
    assert.equal(seen.subscriptionGone, false);
    assert.equal(seen.deleted, false);
    // api-version 2017-04 has no MaxMessageSizeInKilobytes: Service Bus refuses it.
    assert.deepEqual(seen.oldVersion, ["plain-2017", 400]);
  },
);


/** Runs `script` with an administration client's connection string to `broker`; its last line. */
async function seenBy(broker, script) {
  const outcome = await runAdmin({
    CONNECTION_STRING:
      `Endpoint=sb://localhost:${broker.adminPort}/;` +
      "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE",
    NODE_EXTRA_CA_CERTS: path.join(certificates, "ca.pem"),
  }, script);
  assert.equal(outcome.code, 0, outcome.stderr);
  return JSON.parse(outcome.stdout.trim().split("\n").pop());
}

// UserMetadata on each kind of entity: set at creation, read back by get, list and the create
// and update answers, changed and cleared by an update; 1024 characters at most.
const USER_METADATA_CLIENT = `
const { ServiceBusAdministrationClient } = require("@azure/service-bus");
(async () => {
  const client = new ServiceBusAdministrationClient(process.env.CONNECTION_STRING);
  const seen = {};
  const queue = await client.createQueue("noted", { userMetadata: "queue <notes> & more" });
  const topic = await client.createTopic("noted-topic", { userMetadata: "topic notes" });
  const subscription = await client.createSubscription("noted-topic", "noted",
    { userMetadata: "subscription notes" });
  seen.created = [queue.userMetadata, topic.userMetadata, subscription.userMetadata];
  seen.got = [(await client.getQueue("noted")).userMetadata,
    (await client.getTopic("noted-topic")).userMetadata,
    (await client.getSubscription("noted-topic", "noted")).userMetadata,
    (await client.getQueue("declared")).userMetadata ?? "none"];
  seen.listed = [];
  for await (const listed of client.listQueues()) seen.listed.push([listed.name, listed.userMetadata ?? "none"]);
  for await (const listed of client.listTopics()) seen.listed.push([listed.name, listed.userMetadata ?? "none"]);
  for await (const listed of client.listSubscriptions("noted-topic")) seen.listed.push([listed.subscriptionName, listed.userMetadata]);
  queue.userMetadata = "é".repeat(1024);
  topic.userMetadata = "changed topic";
  subscription.userMetadata = "changed subscription";
  seen.updated = [(await client.updateQueue(queue)).userMetadata.length,
    (await client.updateTopic(topic)).userMetadata,
    (await client.updateSubscription(subscription)).userMetadata];
  seen.afterUpdate = [(await client.getQueue("noted")).userMetadata.length,
    (await client.getTopic("noted-topic")).userMetadata,
    (await client.getSubscription("noted-topic", "noted")).userMetadata];
  const refused = (promise) => promise.then(() => "accepted", (e) => [e.statusCode, e.message]);
  queue.userMetadata = "x".repeat(1025);
  seen.tooLong = [await refused(client.updateQueue(queue)),
    await refused(client.createTopic("long", { userMetadata: "x".repeat(1025) })),
    await refused(client.createSubscription("noted-topic", "long", { userMetadata: "x".repeat(1025) }))];
  queue.userMetadata = "";
  await client.updateQueue(queue);
  seen.cleared = (await client.getQueue("noted")).userMetadata ?? "none";
  console.log(JSON.stringify(seen));
})().catch((error) => { console.error(error.code, error.message); process.exit(1); });
`;

brokerTest("UserMetadata is kept on queues, topics and subscriptions and read back", SECURED,
  async ({ broker }) => {
    const seen = await seenBy(broker, USER_METADATA_CLIENT);
    assert.deepEqual(seen.created, ["queue <notes> & more", "topic notes", "subscription notes"]);
    assert.deepEqual(seen.got, ["queue <notes> & more", "topic notes", "subscription notes", "none"]);
    assert.deepEqual(seen.listed, [["declared", "none"], ["noted", "queue <notes> & more"],
      ["events", "none"], ["noted-topic", "topic notes"], ["noted", "subscription notes"]]);
    // 1024 characters is Service Bus's bound (QueueProperties.UserMetadata: "Max length is
    // 1024 chars"); two-byte characters count once.
    assert.deepEqual(seen.updated, [1024, "changed topic", "changed subscription"]);
    assert.deepEqual(seen.afterUpdate, [1024, "changed topic", "changed subscription"]);
    for (const [status, message] of seen.tooLong) {
      assert.equal(status, 400);
      assert.match(message,
        /UserMetadata = "x{40}"\.\.\.: is 1025 characters long; Service Bus allows at most 1024/);
    }
    assert.equal(seen.cleared, "none", "an empty UserMetadata clears it");
  });

// api-version 2017-04: what the client gets back it can send back (get, then update).
const OLD_VERSION_CLIENT = `
const { ServiceBusAdministrationClient } = require("@azure/service-bus");
(async () => {
  const old = new ServiceBusAdministrationClient(process.env.CONNECTION_STRING, { serviceVersion: "2017-04" });
  const current = new ServiceBusAdministrationClient(process.env.CONNECTION_STRING);
  const seen = {};
  const created = await old.createQueue("old-queue");
  seen.sizes = [created.maxMessageSizeInKilobytes ?? "none"];
  const queue = await old.getQueue("old-queue");
  seen.sizes.push(queue.maxMessageSizeInKilobytes ?? "none");
  for await (const listed of old.listQueues()) seen.sizes.push(listed.maxMessageSizeInKilobytes ?? "none");
  queue.maxDeliveryCount = 7;
  seen.queue = [(await old.updateQueue(queue)).maxDeliveryCount, (await old.getQueue("old-queue")).maxDeliveryCount];
  const topic = await old.getTopic("events");
  seen.sizes.push(topic.maxMessageSizeInKilobytes ?? "none");
  topic.defaultMessageTimeToLive = "PT1H";
  seen.topic = (await old.updateTopic(topic)).defaultMessageTimeToLive;
  seen.current = [(await current.getQueue("old-queue")).maxMessageSizeInKilobytes,
    (await current.getTopic("events")).maxMessageSizeInKilobytes];
  console.log(JSON.stringify(seen));
})().catch((error) => { console.error(error.code, error.message); process.exit(1); });
`;

brokerTest("at api-version 2017-04 a description read back is taken back", SECURED,
  async ({ broker }) => {
    const seen = await seenBy(broker, OLD_VERSION_CLIENT);
    // MaxMessageSizeInKilobytes came with 2021-05: Service Bus leaves it out of 2017-04's
    // descriptions (and refuses it in them, as the first test shows).
    assert.deepEqual(seen.sizes, ["none", "none", "none", "none", "none"]);
    assert.deepEqual(seen.queue, [7, 7]);
    assert.equal(seen.topic, "PT1H");
    assert.ok(seen.current.every((size) => size > 0), "2021-05 still reports it");
  });

// A subscription created with a default rule whose filter and action have parameters.
const DEFAULT_RULE_CLIENT = `
const { ServiceBusAdministrationClient } = require("@azure/service-bus");
(async () => {
  const client = new ServiceBusAdministrationClient(process.env.CONNECTION_STRING);
  const seen = {};
  const created = await client.createSubscription("events", "picky", {
    defaultRuleOptions: {
      name: "rule",
      filter: {
        sqlExpression: "stringValue = @stringParam AND intValue = @intParam",
        sqlParameters: { "@intParam": 1, "@stringParam": "b" },
      },
      action: { sqlExpression: "SET picked = @picked", sqlParameters: { "@picked": "yes" } },
    },
  });
  seen.created = created.subscriptionName;
  const rule = await client.getRule("events", "picky", "rule");
  seen.rule = [rule.name, rule.filter.sqlExpression, rule.filter.sqlParameters,
    rule.action.sqlExpression, rule.action.sqlParameters];
  seen.rules = [];
  for await (const listed of client.listRules("events", "picky")) seen.rules.push(listed.name);
  console.log(JSON.stringify(seen));
})().catch((error) => { console.error(error.code, error.message); process.exit(1); });
`;

brokerTest("a subscription is created with a default rule that has parameters", SECURED,
  async ({ broker, client }) => {
    const seen = await seenBy(broker, DEFAULT_RULE_CLIENT);
    assert.equal(seen.created, "picky");
    assert.deepEqual(seen.rule, ["rule", "stringValue = @stringParam AND intValue = @intParam",
      { "@intParam": 1, "@stringParam": "b" }, "SET picked = @picked", { "@picked": "yes" }]);
    assert.deepEqual(seen.rules, ["rule"], "the default rule is the only one");
    // The one that does not match goes first: had it been copied, it would arrive first.
    await send(client, "events", [
      numbered("rule", 0, { applicationProperties: { stringValue: "b", intValue: 2 } }),
      numbered("rule", 1, { applicationProperties: { stringValue: "b", intValue: 1 } }),
    ]);
    const receiver = client.createReceiver("events", "picky", { receiveMode: "receiveAndDelete" });
    try {
      const [picked] = await receiveExactly(receiver, 1);
      assert.equal(picked.messageId, "rule-1");
      assert.equal(picked.applicationProperties.picked, "yes");
    } finally {
      await receiver.close();
    }
  });
