"use strict";
// Partitioned queues and topics against @azure/service-bus (issue 34): the JavaScript side of
// tests/python/test_partitions.py. Sequence numbers carry the partition in their top 16 bits;
// session ids and partition keys pick one partition; a receiver gets every partition's
// messages; settlement, renewal, deferral, scheduling and peek find the partition from the
// number or the lock token; a rule added at run time applies in every partition.

const assert = require("node:assert/strict");

const { brokerTest, ids, receiveExactly, withReceiver } = require("./common");

const PARTITIONS = 4;
const QUEUES = [
  { name: "pq", partitions: PARTITIONS },
  { name: "psq", partitions: PARTITIONS, requires_session: true },
];
const TOPICS = [{ name: "pt", partitions: PARTITIONS, subscriptions: ["all", "red"] }];

/** The partition a sequence number (a `Long`) belongs to. */
const partitionOf = (message) => message.sequenceNumber.shiftRight(48).toNumber();

/** Sends each item (a message or a list) on its own, through one sender. */
async function sendEach(client, entity, items) {
  const sender = client.createSender(entity);
  try {
    for (const item of items) await sender.sendMessages(item);
  } finally {
    await sender.close();
  }
}

/** Receives and completes `count` messages of `receiver`; returns them. */
async function drain(receiver, count) {
  const received = await receiveExactly(receiver, count);
  for (const message of received) await receiver.completeMessage(message);
  return received;
}

const message = (id, fields = {}) => ({ body: id, messageId: id, ...fields });
const range = (count) => [...Array(count).keys()];

brokerTest(
  "plain sends spread over the partitions and one receiver gets them all",
  { queues: QUEUES },
  async ({ client }) => {
    await sendEach(client, "pq", range(20).map((i) => message(`m${i}`)));
    await withReceiver(client, "pq", async (receiver) => {
      const received = await drain(receiver, 20);
      assert.deepEqual(new Set(received.map(partitionOf)), new Set(range(PARTITIONS)));
      assert.deepEqual(ids(received).sort(), range(20).map((i) => `m${i}`).sort());
      assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
    });
  },
);

brokerTest(
  "a partition key and a session id each keep their messages in one partition, in order",
  { queues: QUEUES },
  async ({ client }) => {
    await sendEach(client, "pq", range(5).map((i) => message(`k${i}`, { partitionKey: "orders" })));
    await sendEach(client, "psq", range(5).map((i) => message(`s${i}`, { sessionId: "cart-7" })));
    await withReceiver(client, "pq", async (receiver) => {
      const received = await drain(receiver, 5);
      assert.equal(new Set(received.map(partitionOf)).size, 1);
      received.sort((a, b) => a.sequenceNumber.compare(b.sequenceNumber));
      assert.deepEqual(ids(received), range(5).map((i) => `k${i}`));
    });
    const session = await client.acceptSession("psq", "cart-7");
    try {
      const received = await drain(session, 5);
      assert.deepEqual(ids(received), range(5).map((i) => `s${i}`));
      assert.equal(new Set(received.map(partitionOf)).size, 1);
    } finally {
      await session.close();
    }
  },
);

brokerTest(
  "acceptNextSession finds the sessions of every partition",
  { queues: QUEUES },
  async ({ client }) => {
    const sessions = range(6).map((i) => `session-${i}`);
    await sendEach(client, "psq", sessions.map((s) => [message(`${s}/0`, { sessionId: s }), message(`${s}/1`, { sessionId: s })]));
    const found = new Map();
    while (found.size < sessions.length) {
      const receiver = await client.acceptNextSession("psq");
      try {
        await receiver.setSessionState("seen");
        assert.equal(await receiver.getSessionState(), "seen");
        found.set(receiver.sessionId, ids(await drain(receiver, 2)));
      } finally {
        await receiver.close();
      }
    }
    for (const s of sessions) assert.deepEqual(found.get(s), [`${s}/0`, `${s}/1`]);
  },
);

brokerTest(
  "peek ascends across partitions, and schedule, defer, renew and dead-letter find theirs",
  { queues: QUEUES },
  async ({ client }) => {
    await sendEach(client, "pq", range(12).map((i) => message(`d${i}`)));
    const sender = client.createSender("pq");
    const later = new Date(Date.now() + 3_600_000);
    const scheduled = await sender.scheduleMessages([message("later", { partitionKey: "x" })], later);
    await sender.cancelScheduledMessages(scheduled);
    await sender.close();
    await withReceiver(client, "pq", async (receiver) => {
      const peeked = [];
      for (;;) {
        const page = await receiver.peekMessages(5);
        if (page.length === 0) break;
        peeked.push(...page);
      }
      const numbers = peeked.map((m) => m.sequenceNumber);
      assert.equal(numbers.length, 12, "the cancelled message is gone");
      for (let i = 1; i < numbers.length; i++) assert.ok(numbers[i - 1].lessThan(numbers[i]));

      const got = await receiveExactly(receiver, 12);
      for (const m of got) await receiver.renewMessageLock(m);
      const deferred = got.slice(0, 4);
      for (const m of deferred) await receiver.deferMessage(m);
      for (const m of got.slice(4, 6)) await receiver.deadLetterMessage(m, { deadLetterReason: "bad" });
      for (const m of got.slice(6)) await receiver.completeMessage(m);
      const taken = await receiver.receiveDeferredMessages(deferred.map((m) => m.sequenceNumber));
      assert.deepEqual(ids(taken).sort(), ids(deferred).sort());
      for (const m of taken) await receiver.completeMessage(m);
    });
    await withReceiver(client, "pq", { subQueueType: "deadLetter" }, async (receiver) => {
      const dead = await drain(receiver, 2);
      assert.deepEqual(dead.map((m) => m.deadLetterReason), ["bad", "bad"]);
    });
  },
);

brokerTest(
  "a rule added at run time filters a partitioned topic in every partition",
  { topics: TOPICS },
  async ({ client }) => {
    const rules = client.createRuleManager("pt", "red");
    await rules.deleteRule("$Default");
    await rules.createRule("red", { sqlExpression: "colour = 'red'" });
    const colours = range(16).map((i) => (i % 2 ? "red" : "blue"));
    await sendEach(client, "pt", colours.map((colour, i) => message(`t${i}`, { applicationProperties: { colour } })));
    const all = client.createReceiver("pt", "all");
    const red = client.createReceiver("pt", "red");
    try {
      const everything = await drain(all, 16);
      assert.deepEqual(new Set(everything.map(partitionOf)), new Set(range(PARTITIONS)));
      const picked = await drain(red, 8);
      assert.deepEqual(ids(picked).sort(), range(16).filter((i) => i % 2).map((i) => `t${i}`).sort());
      assert.deepEqual(await red.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
    } finally {
      await all.close();
      await red.close();
    }
  },
);
