"use strict";
// The broker against the official Azure Service Bus SDK for JavaScript (@azure/service-bus, on
// rhea), unmodified: the JavaScript twin of tests/python/test_azure_sdk.py.
//
// `UseDevelopmentEmulator=true` in the connection string means plain TCP to the endpoint's port.
// Before any link the SDK authenticates with a CBS `put-token` on `$cbs`; peek, lock renewal and
// deferred receive go through the entity's `$management` node. Each test runs its own broker and
// client (common.js).

const assert = require("node:assert/strict");

const {
  CLOCK_SLACK_MS,
  assertOnlyMarkerLeft,
  brokerTest,
  expectedSummary,
  ids,
  numbered,
  receiveExactly,
  receiveOne,
  rejection,
  send,
  seq,
  summary,
  withReceiver,
} = require("./common");

// The broker's default lock duration (design.md section 4).
const DEFAULT_LOCK_MS = 60_000;

/**
 * Send five messages in three calls: one message, a list of two, a batch of two. Returns their
 * expected summaries in send order.
 */
async function sendSingleListAndBatch(client, queue, tag) {
  const sender = client.createSender(queue);
  try {
    await sender.sendMessages(numbered(tag, 0));
    await sender.sendMessages([numbered(tag, 1), numbered(tag, 2)]);
    const batch = await sender.createMessageBatch();
    assert.ok(batch.tryAddMessage(numbered(tag, 3)), "a small message fits a batch");
    assert.ok(batch.tryAddMessage(numbered(tag, 4)), "a small message fits a batch");
    await sender.sendMessages(batch);
  } finally {
    await sender.close();
  }
  return [0, 1, 2, 3, 4].map((index) => expectedSummary(tag, index));
}

brokerTest("single, list and batch sends arrive intact in peek-lock", async ({ client }) => {
  const expected = await sendSingleListAndBatch(client, "q1", "intact");

  await withReceiver(client, "q1", async (receiver) => {
    const received = await receiveExactly(receiver, expected.length);
    assert.deepEqual(received.map(summary), expected, "message id, body or properties differ");
    for (const message of received) await receiver.completeMessage(message);
  });
});

brokerTest("received messages carry sequence number, times and count", async ({ client }) => {
  const sentAt = Date.now();
  const expected = await sendSingleListAndBatch(client, "q1", "annotated");

  await withReceiver(client, "q1", async (receiver) => {
    const beforeReceive = Date.now();
    const received = await receiveExactly(receiver, expected.length);
    const afterReceive = Date.now();
    assert.deepEqual(ids(received), expected.map(([id]) => id));

    const numbers = received.map(seq);
    assert.deepEqual(
      numbers,
      numbers.map((_, i) => numbers[0] + i),
      `sequence numbers are not gap-free and increasing across the sends: ${numbers}`,
    );
    for (const message of received) {
      const enqueued = message.enqueuedTimeUtc;
      assert.ok(enqueued instanceof Date, `${message.messageId}: enqueuedTimeUtc ${enqueued}`);
      assert.ok(
        sentAt - CLOCK_SLACK_MS <= enqueued.getTime() &&
          enqueued.getTime() <= afterReceive + CLOCK_SLACK_MS,
        `${message.messageId}: enqueued ${enqueued.toISOString()} not between the send and ` +
          "the receive",
      );
      assert.equal(message.deliveryCount, 0, `${message.messageId}: first receipt's deliveryCount`);
      const lockedUntil = message.lockedUntilUtc;
      assert.ok(lockedUntil instanceof Date, `${message.messageId}: lockedUntilUtc ${lockedUntil}`);
      assert.ok(
        beforeReceive + DEFAULT_LOCK_MS - CLOCK_SLACK_MS <= lockedUntil.getTime() &&
          lockedUntil.getTime() <= afterReceive + DEFAULT_LOCK_MS + CLOCK_SLACK_MS,
        `${message.messageId}: locked until ${lockedUntil.toISOString()}, ` +
          "not 60 s after the receive",
      );
      assert.equal(typeof message.lockToken, "string", `${message.messageId}: a lock token`);
    }
    const times = received.map((message) => message.enqueuedTimeUtc.getTime());
    assert.deepEqual(times, [...times].sort((a, b) => a - b), "enqueued times go back");
    for (const message of received) await receiver.completeMessage(message);
  });
});

brokerTest("receive-and-delete delivers once", async ({ client }) => {
  await send(client, "q1", [0, 1, 2].map((i) => numbered("once", i)));

  const received = await withReceiver(client, "q1", { receiveMode: "receiveAndDelete" }, (r) =>
    receiveExactly(r, 3),
  );
  assert.deepEqual(received.map(summary), [0, 1, 2].map((i) => expectedSummary("once", i)));
  for (const message of received) {
    assert.equal(message.lockedUntilUtc, undefined, `${message.messageId} has a lock`);
  }

  // A second receiver gets nothing of them: the marker sent afterwards comes first.
  await assertOnlyMarkerLeft(client, "q1", "receiveAndDelete");
});

brokerTest("complete removes the message", async ({ client }) => {
  await send(client, "q1", numbered("complete", 0));

  await withReceiver(client, "q1", async (receiver) => {
    const message = await receiveOne(receiver);
    assert.deepEqual(summary(message), expectedSummary("complete", 0));
    await receiver.completeMessage(message);
  });

  await assertOnlyMarkerLeft(client, "q1");
});

brokerTest("a message sent without a messageId is given one", async ({ client }) => {
  // The JavaScript SDK sends no message-id unless the application sets one (the Python SDK
  // always sets a uuid), and Service Bus then assigns one. The SDK depends on it: its automatic
  // lock renewal (on by default in peek-lock) keys on messageId, and completing a message without
  // one, or closing its receiver, throws "Failed to stop auto lock renewal - no message ID".
  await send(client, "q1", { body: "anonymous" });

  await withReceiver(client, "q1", async (receiver) => {
    const message = await receiveOne(receiver);
    assert.equal(message.body, "anonymous");
    assert.ok(
      typeof message.messageId === "string" && message.messageId.length > 0,
      `the broker assigned no messageId: ${message.messageId}`,
    );
    await receiver.completeMessage(message);
  });

  await assertOnlyMarkerLeft(client, "q1");
});

brokerTest(
  "abandon redelivers with deliveryCount + 1 and the properties to modify",
  async ({ client }) => {
    await send(client, "q1", numbered("abandon", 0));

    await withReceiver(client, "q1", async (receiver) => {
      const first = await receiveOne(receiver);
      assert.deepEqual([first.messageId, first.deliveryCount], ["abandon-0", 0]);
      await receiver.abandonMessage(first, { reason: "retry later", tag: "changed", attempt: 1 });

      const again = await receiveOne(receiver);
      assert.equal(seq(again), seq(first), "abandon keeps the sequence number");
      assert.equal(again.deliveryCount, 1, "deliveryCount after one abandon");
      assert.deepEqual(
        summary(again),
        [
          "abandon-0",
          "abandon body 0",
          { index: 0, tag: "changed", reason: "retry later", attempt: 1 },
        ],
        "the properties to modify are merged into the application properties",
      );
      await receiver.completeMessage(again);
    });

    await assertOnlyMarkerLeft(client, "q1");
  },
);

brokerTest("a deferred message is received only by sequence number", async ({ client }) => {
  await send(client, "q1", numbered("defer", 0));

  await withReceiver(client, "q1", async (receiver) => {
    const original = await receiveOne(receiver);
    assert.equal(original.messageId, "defer-0");
    await receiver.deferMessage(original);

    // A normal receive skips the deferred message: the marker sent afterwards comes first.
    await assertOnlyMarkerLeft(client, "q1");

    const deferred = await receiver.receiveDeferredMessages(original.sequenceNumber);
    assert.deepEqual(deferred.map(summary), [expectedSummary("defer", 0)]);
    assert.equal(seq(deferred[0]), seq(original));
    assert.equal(deferred[0].state, "deferred", "a deferred message says so");
    assert.ok(
      deferred[0].lockedUntilUtc instanceof Date && deferred[0].lockedUntilUtc > new Date(),
      `a deferred message received in peek-lock is locked: ${deferred[0].lockedUntilUtc}`,
    );
    await receiver.completeMessage(deferred[0]);

    const error = await rejection(
      receiver.receiveDeferredMessages(original.sequenceNumber),
      "receiving a completed deferred message",
    );
    assert.equal(error.code, "MessageNotFound", `${error.code}: ${error.message}`);
  });
});

brokerTest("dead-letter keeps reason and description", async ({ client }) => {
  await send(client, "q1", numbered("dead", 0));

  const number = await withReceiver(client, "q1", async (receiver) => {
    const message = await receiveOne(receiver);
    await receiver.deadLetterMessage(message, {
      deadLetterReason: "r1",
      deadLetterErrorDescription: "d1",
    });
    return seq(message);
  });

  await withReceiver(client, "q1", { subQueueType: "deadLetter" }, async (dlq) => {
    const dead = await receiveOne(dlq);
    assert.deepEqual(summary(dead).slice(0, 2), expectedSummary("dead", 0).slice(0, 2));
    assert.deepEqual([dead.deadLetterReason, dead.deadLetterErrorDescription], ["r1", "d1"]);
    assert.equal(seq(dead), number, "dead-lettering keeps the sequence number");
    await dlq.completeMessage(dead);
  });

  await assertOnlyMarkerLeft(client, "q1");
});

brokerTest(
  "max delivery count dead-letters after two abandons",
  { queues: [{ name: "q1", max_delivery_count: 2 }] },
  async ({ client }) => {
    await send(client, "q1", numbered("limit", 0));

    await withReceiver(client, "q1", async (receiver) => {
      for (const attempt of [0, 1]) {
        const message = await receiveOne(receiver);
        assert.deepEqual([message.messageId, message.deliveryCount], ["limit-0", attempt]);
        await receiver.abandonMessage(message);
      }
    });

    await withReceiver(client, "q1", { subQueueType: "deadLetter" }, async (dlq) => {
      const dead = await receiveOne(dlq);
      assert.equal(dead.messageId, "limit-0");
      assert.equal(
        dead.deadLetterReason,
        "MaxDeliveryCountExceeded",
        `deadLetterReason ${dead.deadLetterReason}, description ${dead.deadLetterErrorDescription}`,
      );
      await dlq.completeMessage(dead);
    });

    await assertOnlyMarkerLeft(client, "q1");
  },
);

brokerTest("renewMessageLock moves lockedUntilUtc forward", async ({ client }) => {
  await send(client, "q1", numbered("renew", 0));

  await withReceiver(client, "q1", { maxAutoLockRenewalDurationInMs: 0 }, async (receiver) => {
    const message = await receiveOne(receiver);
    const before = message.lockedUntilUtc;
    assert.ok(before instanceof Date, "a peek-lock message has lockedUntilUtc");

    const renewed = await receiver.renewMessageLock(message);
    assert.ok(renewed instanceof Date, `renewMessageLock returned ${renewed}`);
    assert.ok(
      renewed > before,
      `renewed lock ${renewed.toISOString()} is not later than ${before.toISOString()}`,
    );
    assert.equal(message.lockedUntilUtc.getTime(), renewed.getTime(), "the message shows it");
    assert.ok(
      renewed.getTime() <= Date.now() + DEFAULT_LOCK_MS + CLOCK_SLACK_MS,
      `lock renewed too far: ${renewed.toISOString()}`,
    );
    await receiver.completeMessage(message);
  });

  await assertOnlyMarkerLeft(client, "q1");
});

brokerTest("peek does not lock, and an empty queue peeks as empty", async ({ client }) => {
  await withReceiver(client, "q1", async (receiver) => {
    const nothing = await receiver.peekMessages(10);
    assert.deepEqual(ids(nothing), [], "peek on an empty queue");

    await send(client, "q1", [0, 1, 2].map((i) => numbered("peek", i)));
    const peeked = await receiver.peekMessages(10);
    assert.deepEqual(peeked.map(summary), [0, 1, 2].map((i) => expectedSummary("peek", i)));
    const numbers = peeked.map(seq);
    assert.deepEqual(numbers, [numbers[0], numbers[0] + 1, numbers[0] + 2], "peeked numbers");
    for (const message of peeked) {
      assert.equal(message.state, "active", `${message.messageId}: state`);
      assert.equal(message.lockedUntilUtc, undefined, `${message.messageId}: a peek has no lock`);
    }

    const received = await receiveExactly(receiver, 3);
    assert.deepEqual(received.map(seq), numbers, "receive after peek");
    assert.deepEqual(received.map((m) => m.deliveryCount), [0, 0, 0], "peek counts no delivery");
    for (const message of received) await receiver.completeMessage(message);
  });
});

brokerTest("an unknown queue is MessagingEntityNotFound", async ({ client }) => {
  const sender = client.createSender("no-such-queue");
  const sendError = await rejection(sender.sendMessages(numbered("lost", 0)), "a send to no queue");
  await sender.close();
  assert.equal(
    sendError.code,
    "MessagingEntityNotFound",
    `${sendError.code}: ${sendError.message}`,
  );
  assert.match(sendError.message, /no-such-queue/, "the error names the entity");

  const receiver = client.createReceiver("no-such-queue");
  const receiveError = await rejection(
    receiver.receiveMessages(1, { maxWaitTimeInMs: 1000 }),
    "a receive from no queue",
  );
  await receiver.close();
  assert.equal(
    receiveError.code,
    "MessagingEntityNotFound",
    `${receiveError.code}: ${receiveError.message}`,
  );
});

brokerTest(
  "an oversized message is MessageSizeExceeded and the sender still works",
  { settings: { max_message_size: "64KiB" } },
  async ({ client }) => {
    const big = { body: Buffer.alloc(100 * 1024, "x"), messageId: "big" };
    const sender = client.createSender("q1");
    try {
      // A single message goes out as is: the broker rejects it.
      const error = await rejection(sender.sendMessages(big), "sending 100 KiB");
      assert.equal(error.code, "MessageSizeExceeded", `${error.code}: ${error.message}`);

      // A batch is sized by the SDK against the max-message-size of the broker's attach.
      const batch = await sender.createMessageBatch();
      assert.equal(batch.maxSizeInBytes, 64 * 1024, "the batch limit is the broker's");
      assert.equal(batch.tryAddMessage(big), false, "a 100 KiB message fits no 64 KiB batch");

      await sender.sendMessages(numbered("small", 0));
    } finally {
      await sender.close();
    }

    await withReceiver(client, "q1", async (receiver) => {
      const message = await receiveOne(receiver);
      assert.deepEqual(summary(message), expectedSummary("small", 0), "only the small one is kept");
      await receiver.completeMessage(message);
    });
  },
);

brokerTest(
  "an oversized schedule is MessageSizeExceeded at once, on a queue and a topic, and the sender still schedules",
  {
    settings: { max_message_size: "64KiB" },
    topics: [{ name: "t1", subscriptions: ["s1"] }],
  },
  async ({ client }) => {
    // The SDK's own suite schedules a 256 KB body over the entity's limit and expects
    // MessageSizeExceeded: it fails a pending management request only on a response or a
    // detach of the request link, never on a rejected delivery.
    const big = { body: Buffer.alloc(100 * 1024, "x"), messageId: "big" };
    const later = new Date(Date.now() + 60 * 60 * 1000);
    for (const entity of ["q1", "t1"]) {
      const sender = client.createSender(entity);
      try {
        const error = await rejection(sender.scheduleMessages(big, later), `scheduling 100 KiB on ${entity}`);
        assert.equal(error.code, "MessageSizeExceeded", `${entity}: ${error.code}: ${error.message}`);
        const [number] = await sender.scheduleMessages(numbered("small", 0), later);
        await sender.cancelScheduledMessages(number);
      } finally {
        await sender.close();
      }
    }
  },
);

brokerTest(
  "a repeated messageId is kept once by a queue that detects duplicates",
  {
    queues: [
      { name: "dedup", requires_duplicate_detection: true },
      { name: "plain" },
    ],
  },
  async ({ client }) => {
    // The JavaScript SDK sends a string id as such, a number as a ulong and a Buffer as binary.
    for (const queue of ["dedup", "plain"]) {
      await send(client, queue, [
        { body: "first", messageId: "order-1" },
        { body: "numbered", messageId: 7 },
        { body: "binary", messageId: Buffer.from("b1") },
      ]);
      await send(client, queue, [
        { body: "retry", messageId: "order-1" },
        { body: "numbered retry", messageId: 7 },
        { body: "binary retry", messageId: Buffer.from("b1") },
      ]);
    }
    await withReceiver(client, "dedup", async (receiver) => {
      const received = await receiveExactly(receiver, 3);
      assert.deepEqual(
        received.map((m) => m.body),
        ["first", "numbered", "binary"],
      );
      for (const message of received) await receiver.completeMessage(message);
    });
    await assertOnlyMarkerLeft(client, "dedup");
    await withReceiver(client, "plain", async (receiver) => {
      assert.equal((await receiveExactly(receiver, 6)).length, 6, "no detection: all kept");
    });
  },
);

brokerTest(
  "a forwarding queue moves its messages and dead letters on and refuses receivers",
  {
    queues: [
      { name: "in", forward_to: "out", forward_dead_lettered_messages_to: "errors" },
      { name: "work", forward_dead_lettered_messages_to: "errors" },
      { name: "out", requires_duplicate_detection: true },
      { name: "errors" },
    ],
  },
  async ({ client }) => {
    await send(client, "in", [numbered("fw", 0), numbered("fw", 1), numbered("fw", 0)]);
    await withReceiver(client, "out", async (receiver) => {
      const received = await receiveExactly(receiver, 2);
      assert.deepEqual(received.map(summary), [
        expectedSummary("fw", 0),
        expectedSummary("fw", 1),
      ]);
      for (const message of received) await receiver.completeMessage(message);
    });
    await assertOnlyMarkerLeft(client, "out");

    const receiver = client.createReceiver("in");
    try {
      const error = await rejection(
        receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 }),
        "receiving from a forwarding queue",
      );
      assert.match(error.message, /auto-forwarding/, `${error.code}: ${error.message}`);
    } finally {
      await receiver.close();
    }

    await send(client, "work", numbered("dl", 0));
    await withReceiver(client, "work", async (receiver) => {
      await receiver.deadLetterMessage(await receiveOne(receiver), {
        deadLetterReason: "Broken",
        deadLetterErrorDescription: "cannot be processed",
      });
    });
    await withReceiver(client, "errors", async (receiver) => {
      const moved = await receiveOne(receiver);
      assert.equal(moved.messageId, "dl-0");
      assert.equal(moved.applicationProperties.DeadLetterReason, "Broken");
      await receiver.completeMessage(moved);
    });
  },
);

brokerTest(
  "an entity's status refuses sends and receives as Service Bus words them",
  {
    queues: [
      { name: "closed", status: "send_disabled" },
      { name: "dark", status: "receive_disabled" },
    ],
  },
  async ({ client }) => {
    const sender = client.createSender("closed");
    try {
      const error = await rejection(
        sender.sendMessages(numbered("off", 0)),
        "sending to a send-disabled queue",
      );
      assert.equal(error.code, "MessagingEntityDisabled", error.message);
      assert.match(error.message, /'closed' is currently disabled for Send operations/);
    } finally {
      await sender.close();
    }

    await send(client, "dark", numbered("kept", 0));
    const receiver = client.createReceiver("dark");
    try {
      const error = await rejection(
        receiver.receiveMessages(1, { maxWaitTimeInMs: 5_000 }),
        "receiving from a receive-disabled queue",
      );
      assert.equal(error.code, "MessagingEntityDisabled", error.message);
      assert.match(error.message, /'dark' is currently disabled for Receive operations/);
    } finally {
      await receiver.close();
    }
  },
);
