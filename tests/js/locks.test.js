"use strict";
// Peek-lock locks running out, with @azure/service-bus: a late complete or renew is lock lost,
// and a receiver's locks outlive the receiver (as in Service Bus: closing a receiver settles
// nothing, its messages stay locked until the lock duration ends).
//
// Receivers here turn the SDK's automatic lock renewal off (`maxAutoLockRenewalDurationInMs: 0`,
// default 5 minutes), or it would keep the locks alive. The waits on the clock are for a lock
// to expire; what a slow machine could race is judged on the lock times the broker reports and
// on when a message arrived, never on when the test got round to looking.

const assert = require("node:assert/strict");

const {
  CLOCK_SLACK_MS,
  brokerTest,
  expectedSummary,
  numbered,
  receiveOne,
  rejection,
  send,
  seq,
  summary,
  waitUntilPast,
  withReceiver,
} = require("./common");

const LOCK_MS = 2_000;
const SHORT_LOCK = { queues: [{ name: "q1", lock_duration: `${LOCK_MS / 1000}s` }] };
const NO_RENEWAL = { maxAutoLockRenewalDurationInMs: 0 };
// How much earlier than lockedUntilUtc a lapsed lock's message may be seen again.
const TIMER_SLACK_MS = 5;

/** A test on a broker whose q1 has a LOCK_MS lock. */
const lockTest = (name, body) => brokerTest(name, SHORT_LOCK, body);

/** Asserts that `message` is locked for the queue's LOCK_MS from about the receive. */
function assertLockedForLockDuration(message, beforeReceive, afterReceive) {
  const lockedUntil = message.lockedUntilUtc;
  assert.ok(lockedUntil instanceof Date, `lockedUntilUtc ${lockedUntil}`);
  assert.ok(
    beforeReceive + LOCK_MS - CLOCK_SLACK_MS <= lockedUntil.getTime() &&
      lockedUntil.getTime() <= afterReceive + LOCK_MS + CLOCK_SLACK_MS,
    `locked until ${lockedUntil.toISOString()}: not the queue's ${LOCK_MS} ms lock`,
  );
}

/** The message back after its lock lapsed: same number, deliveryCount 1. */
async function assertReturnsOnceMore(client, first) {
  await withReceiver(client, "q1", NO_RENEWAL, async (receiver) => {
    const again = await receiveOne(receiver);
    assert.deepEqual(summary(again), summary(first));
    assert.equal(seq(again), seq(first), "the same message");
    assert.equal(again.deliveryCount, 1, "deliveryCount after a lapsed lock");
    await receiver.completeMessage(again);
  });
}

lockTest("a complete after the lock expired is MessageLockLost", async ({ client }) => {
  await send(client, "q1", numbered("expire", 0));

  const first = await withReceiver(client, "q1", NO_RENEWAL, async (receiver) => {
    const beforeReceive = Date.now();
    const message = await receiveOne(receiver);
    assertLockedForLockDuration(message, beforeReceive, Date.now());

    await waitUntilPast(message.lockedUntilUtc);
    // Unlike the Python SDK, the JavaScript SDK does not judge the lock itself: the disposition
    // goes out and the broker answers `rejected{com.microsoft:message-lock-lost}`.
    const error = await rejection(receiver.completeMessage(message), "a late complete");
    assert.equal(error.code, "MessageLockLost", `${error.code}: ${error.message}`);
    return message;
  });

  await assertReturnsOnceMore(client, first);
});

lockTest("an expired lock cannot be renewed", async ({ client }) => {
  await send(client, "q1", numbered("lapse", 0));

  const first = await withReceiver(client, "q1", NO_RENEWAL, async (receiver) => {
    const message = await receiveOne(receiver);
    assert.equal(message.deliveryCount, 0);
    await waitUntilPast(message.lockedUntilUtc);
    const error = await rejection(receiver.renewMessageLock(message), "renewing an expired lock");
    assert.equal(error.code, "MessageLockLost", `${error.code}: ${error.message}`);
    return message;
  });

  await assertReturnsOnceMore(client, first);
});

lockTest("a closed receiver's locks hold until they expire", async ({ client }) => {
  await send(client, "q1", numbered("held", 0));

  // Received in peek-lock, then the receiver closes (detach) without settling it.
  const first = await withReceiver(client, "q1", NO_RENEWAL, (receiver) => receiveOne(receiver));
  const lockedUntil = first.lockedUntilUtc;
  assert.ok(lockedUntil instanceof Date, `lockedUntilUtc ${lockedUntil}`);

  // A new receiver asks on, with a marker sent after the close to show it could have got the
  // message at once. When each message arrived is what counts, however slowly this test runs.
  await send(client, "q1", { body: "marker", messageId: "marker" });
  const arrivals = await withReceiver(client, "q1", NO_RENEWAL, async (receiver) => {
    const got = [];
    while (got.length < 2) {
      const message = await receiveOne(receiver);
      got.push({ message, at: Date.now() });
      await receiver.completeMessage(message);
    }
    return got;
  });

  const held = arrivals.find(({ message }) => message.messageId === "held-0");
  assert.ok(held, `held-0 never came back: ${arrivals.map(({ message }) => message.messageId)}`);
  // The broker's clock is this one, and lockedUntilUtc has whole milliseconds, so a lock timer
  // that fires on time may precede it by less than a millisecond.
  assert.ok(
    held.at >= lockedUntil.getTime() - TIMER_SLACK_MS,
    `held-0 (deliveryCount ${held.message.deliveryCount}) came back ` +
      `${lockedUntil.getTime() - held.at} ms before its lock ended at ` +
      `${lockedUntil.toISOString()}: closing the receiver released it`,
  );
  assert.deepEqual(summary(held.message), expectedSummary("held", 0));
  assert.equal(seq(held.message), seq(first), "the same message");
  assert.equal(
    held.message.deliveryCount,
    first.deliveryCount + 1,
    "a lapsed lock counts a delivery",
  );
});
