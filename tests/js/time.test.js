"use strict";
// Time in the broker against @azure/service-bus: scheduled messages (schedule, cancel, peek,
// activation) and time to live (the message's, the entity's default as fill-in and cap); the
// JavaScript twin of part of tests/python/test_time.py.
//
// Waits on the clock are only for semantics that are about time (a due time, a TTL), each with
// a margin. What a slow machine could race is judged on the times the broker reports (the
// enqueued time of an activated message) or on the order of messages in the queue (a marker sent
// after an expiry arriving first), not on when the test got round to looking.

const assert = require("node:assert/strict");

const Long = require("long"); // the SDK's own sequence-number type

const {
  assertOnlyMarkerLeft,
  brokerTest,
  expectedSummary,
  ids,
  numbered,
  receiveExactly,
  rejection,
  send,
  seq,
  summary,
  waitUntilPast,
  withReceiver,
} = require("./common");

// How far ahead a test schedules a message it then waits for.
const SCHEDULE_LEAD_MS = 3_000;
// `maxWaitTimeInMs` of the receive that must get nothing before the due time: well inside the lead.
const EARLY_WAIT_MS = 1_000;
// A due time no test reaches: the message stays scheduled.
const FAR_AHEAD_MS = 10 * 60_000;

/** An instant `leadMs` from now (a Date has whole milliseconds, as the SDK sends it). */
function dueIn(leadMs) {
  return new Date(Date.now() + leadMs);
}

/** Every message of the receiver's queue, scheduled and deferred ones included, in order. */
function peekAll(receiver) {
  // From 1, the first number the broker assigns: otherwise the SDK resumes after the last
  // message an earlier peek on the same entity saw.
  return receiver.peekMessages(10, { fromSequenceNumber: Long.ONE });
}

function states(messages) {
  return messages.map((message) => [message.messageId, message.state]);
}

/**
 * Receive `count` messages scheduled for `due`: none before it, all within the deadline. A first
 * receive ends well before `due` and must get nothing, unless a slow machine had already passed
 * `due` when it returned. Whatever the timing, each message's enqueued time (its activation) must
 * not be before `due`.
 */
async function receiveWhenDue(receiver, count, due) {
  const early = await receiver.receiveMessages(count, { maxWaitTimeInMs: EARLY_WAIT_MS });
  const returned = Date.now();
  assert.ok(
    early.length === 0 || returned >= due.getTime(),
    `${ids(early)} received at ${new Date(returned).toISOString()}, before their due time ` +
      due.toISOString(),
  );
  const received = [...early, ...(await receiveExactly(receiver, count - early.length))];
  for (const message of received) {
    assert.ok(
      message.enqueuedTimeUtc.getTime() >= due.getTime(),
      `${message.messageId}: activated (enqueued) at ${message.enqueuedTimeUtc.toISOString()}, ` +
        `before its due time ${due.toISOString()}`,
    );
  }
  return received;
}

// --- scheduled messages ----------------------------------------------------------------------

brokerTest(
  "scheduled messages get numbers, peek as scheduled and arrive at the due time renumbered",
  async ({ client }) => {
    const sender = client.createSender("q1");
    try {
      await withReceiver(client, "q1", async (receiver) => {
        const due = dueIn(SCHEDULE_LEAD_MS);
        const numbers = await sender.scheduleMessages(
          [numbered("sched", 0), numbered("sched", 1)],
          due,
        );
        assert.ok(numbers.every((n) => Long.isLong(n)), `sequence numbers ${numbers}`);
        // A send with a due time schedules too.
        await sender.sendMessages(numbered("sched", 2, { scheduledEnqueueTimeUtc: due }));

        const peeked = await peekAll(receiver);
        assert.deepEqual(states(peeked), [0, 1, 2].map((i) => [`sched-${i}`, "scheduled"]));
        assert.deepEqual(
          peeked.slice(0, 2).map(seq),
          numbers.map((n) => n.toNumber()),
          "peek shows the numbers scheduleMessages returned",
        );
        for (const message of peeked) {
          assert.equal(
            message.scheduledEnqueueTimeUtc?.getTime(),
            due.getTime(),
            `${message.messageId}: the scheduled time is kept`,
          );
        }

        const received = await receiveWhenDue(receiver, 3, due);
        assert.deepEqual(
          received.map(summary).sort(),
          [0, 1, 2].map((i) => expectedSummary("sched", i)).sort(),
        );
        const lastScheduled = Math.max(...peeked.map(seq));
        for (const message of received) {
          assert.ok(
            seq(message) > lastScheduled,
            `${message.messageId}: activated as ${seq(message)}, not a new number after the ` +
              `scheduled ones ${peeked.map(seq)}`,
          );
          // Service Bus delivers a message it held until its due time with state "scheduled"
          // (x-opt-message-state 2), as the SDK's own live suite asserts.
          assert.equal(message.state, "scheduled", `${message.messageId}: state`);
          await receiver.completeMessage(message);
        }
      });
    } finally {
      await sender.close();
    }
  },
);

brokerTest(
  "a subscription delivers a scheduled message as scheduled, one sent due already as active",
  { topics: [{ name: "t", subscriptions: ["s"] }] },
  async ({ client }) => {
    const sender = client.createSender("t");
    try {
      const due = dueIn(SCHEDULE_LEAD_MS);
      await sender.scheduleMessages(numbered("held", 0), due);
      // A due time already past when it arrives: never held, so active.
      await sender.sendMessages(numbered("past", 0, { scheduledEnqueueTimeUtc: new Date(0) }));
      const receiver = client.createReceiver("t", "s");
      try {
        const [past] = await receiveExactly(receiver, 1);
        assert.deepEqual([past.messageId, past.state], ["past-0", "active"]);
        await receiver.completeMessage(past);
        const [held] = await receiveWhenDue(receiver, 1, due);
        assert.deepEqual([held.messageId, held.state], ["held-0", "scheduled"]);
        await receiver.completeMessage(held);
      } finally {
        await receiver.close();
      }
    } finally {
      await sender.close();
    }
  },
);

brokerTest(
  "a cancelled scheduled message leaves peek and is never received",
  async ({ client }) => {
    const sender = client.createSender("q1");
    try {
      await withReceiver(client, "q1", async (receiver) => {
        const cancelledDue = dueIn(SCHEDULE_LEAD_MS - 1_000);
        const [cancelled] = await sender.scheduleMessages(numbered("cancel", 0), cancelledDue);
        const before = await peekAll(receiver);
        assert.deepEqual(
          before.map((m) => [m.messageId, seq(m)]),
          [["cancel-0", cancelled.toNumber()]],
        );

        await sender.cancelScheduledMessages(cancelled);
        const after = await peekAll(receiver);
        assert.deepEqual(states(after), [], "peek after the cancel");
        // Cancelling a number that is no scheduled message answers message-not-found.
        const error = await rejection(sender.cancelScheduledMessages(cancelled), "a second cancel");
        assert.equal(error.code, "MessageNotFound", `${error.code}: ${error.message}`);

        // Due a second after the cancelled one: had that been activated, it would come first.
        const keptDue = new Date(cancelledDue.getTime() + 1_000);
        await sender.scheduleMessages(numbered("cancel", 1), keptDue);
        const [first] = await receiveWhenDue(receiver, 1, keptDue);
        assert.equal(first.messageId, "cancel-1", `${first.messageId} arrived: it was cancelled`);
        await receiver.completeMessage(first);
      });
    } finally {
      await sender.close();
    }
  },
);

brokerTest("peek shows active, deferred and scheduled messages by state", async ({ client }) => {
  await send(client, "q1", [numbered("state", 0), numbered("state", 1)]);
  const sender = client.createSender("q1");
  try {
    await sender.scheduleMessages(numbered("state", 2), dueIn(FAR_AHEAD_MS));
  } finally {
    await sender.close();
  }

  await withReceiver(client, "q1", async (receiver) => {
    const [first] = await receiveExactly(receiver, 1);
    assert.equal(first.messageId, "state-0");
    await receiver.deferMessage(first);

    const peeked = await peekAll(receiver);
    assert.deepEqual(states(peeked), [
      ["state-0", "deferred"],
      ["state-1", "active"],
      ["state-2", "scheduled"],
    ]);
  });
});

// --- time to live ----------------------------------------------------------------------------

brokerTest("a message is not received after its time to live", async ({ client }) => {
  await send(client, "q1", numbered("ttl", 0, { timeToLive: 1_000 }));
  // The broker enqueued it before the send returned, so it has expired 1 s after `sent`.
  const sent = Date.now();
  await waitUntilPast(new Date(sent + 1_000));
  await assertOnlyMarkerLeft(client, "q1");
});

brokerTest(
  "a message without a time to live expires at the entity default",
  { queues: [{ name: "q1", default_message_time_to_live: "1s" }] },
  async ({ client }) => {
    await send(client, "q1", numbered("default", 0));
    const sent = Date.now();
    await waitUntilPast(new Date(sent + 1_000));
    await assertOnlyMarkerLeft(client, "q1");
  },
);

brokerTest(
  "the entity default time to live caps and fills in the message's",
  { queues: [{ name: "q1", default_message_time_to_live: "30s" }] },
  async ({ client }) => {
    const expected = {
      "cap-0": 30_000, // 1 h, capped
      "cap-1": 30_000, // none, the default
      "cap-2": 10_000, // shorter than the default: kept
    };
    const sentTtl = { "cap-0": 3_600_000, "cap-2": 10_000 };
    await send(client, "q1", [
      numbered("cap", 0, { timeToLive: 3_600_000 }),
      numbered("cap", 1),
      numbered("cap", 2, { timeToLive: 10_000 }),
    ]);

    await withReceiver(client, "q1", async (receiver) => {
      const received = await receiveExactly(receiver, 3);
      for (const message of received) {
        const ttl = expected[message.messageId];
        const enqueued = message.enqueuedTimeUtc.getTime();
        // expiresAtUtc is the enqueued time + header.ttl: the broker delivers the effective ttl.
        assert.equal(
          message.expiresAtUtc.getTime() - enqueued,
          ttl,
          `${message.messageId}: expiresAtUtc - enqueuedTimeUtc`,
        );
        const raw = message._rawAmqpMessage.properties;
        const sent = sentTtl[message.messageId];
        if (sent === undefined) {
          // Sent without one: the broker writes absolute-expiry-time = enqueued time + the
          // entity's default, and the SDK's timeToLive is header.ttl.
          assert.equal(raw.creationTime, undefined, `${message.messageId}: creation-time`);
          assert.equal(raw.absoluteExpiryTime - enqueued, ttl, `${message.messageId}: expiry`);
          assert.equal(message.timeToLive, ttl, `${message.messageId}: timeToLive`);
        } else {
          // The sender's creation-time and absolute-expiry-time are kept as sent, as Service
          // Bus keeps them: the SDK's timeToLive (their difference) is what was sent, even
          // where the entity's default cut the message's life short.
          assert.equal(
            raw.absoluteExpiryTime - raw.creationTime,
            sent,
            `${message.messageId}: absolute-expiry-time - creation-time`,
          );
          assert.equal(message.timeToLive, sent, `${message.messageId}: timeToLive`);
        }
        await receiver.completeMessage(message);
      }
    });
  },
);

// Far beyond any entity default a test declares: only the message's own time to live counts.
const HUNDRED_DAYS_MS = 100 * 24 * 3_600_000;

brokerTest(
  "a message's time to live comes back as sent, one past 2^32 - 1 ms included",
  async ({ client }) => {
    const annotated = (id, timeToLive) => ({
      body: `annotated ${id}`,
      bodyType: "value",
      header: { timeToLive },
      properties: { messageId: id },
    });
    const sent = {
      "day-0": 86_400_000,
      "short-0": 100_000,
      // Past 2^32 - 1 ms: the SDK sends header.ttl 2^32 - 1 and absolute-expiry-time =
      // creation-time + 100 days, and reads the difference back.
      "long-0": HUNDRED_DAYS_MS,
    };
    await send(client, "q1", [
      numbered("day", 0, { timeToLive: sent["day-0"] }),
      annotated("short-0", sent["short-0"]),
      annotated("long-0", sent["long-0"]),
    ]);
    await withReceiver(client, "q1", async (receiver) => {
      const peeked = await peekAll(receiver);
      const received = await receiveExactly(receiver, 3);
      for (const [how, messages] of [
        ["peeked", peeked],
        ["received", received],
      ]) {
        assert.deepEqual(
          messages.map((m) => [m.messageId, m.timeToLive]),
          Object.entries(sent),
          `${how}: timeToLive as sent`,
        );
      }
      for (const message of received) await receiver.completeMessage(message);
    });
  },
);
