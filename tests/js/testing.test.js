"use strict";
// `[testing]` against @azure/service-bus: the reset and the controlled clock, called on the
// administration endpoint as a test suite's `beforeEach` would call them (anonymous clients are
// let in here, so no Authorization header).
//
// The reset (`POST /$testing/reset`): a reset between two tests leaves nothing of the first
// (active, scheduled and dead-lettered messages, a subscription's copies), and the queue numbers
// from 1 again.
//
// The controlled clock (`[testing] clock = "controlled"`): `POST /$testing/clock/advance` moves
// the broker's clock forward and answers once what is due at the new time has happened, so each
// time rule fires on an advance with no real wait: a schedule a day ahead, a day's time to live
// dead-lettered, a 5-minute lock lost, a queue auto-deleted after 10 idle minutes. The broker
// may already be ahead of this machine, so due times are taken from its clock
// (`GET /$testing/clock`), never from Date.now(); what happened at the move is judged on the
// times the broker reports. A reset leaves the clock where it is; a move that is no move (a bad
// body, a time in the past) leaves it too.
const assert = require("node:assert/strict");
const Long = require("long");

const {
  CLOCK_SLACK_MS,
  brokerTest,
  expectedSummary,
  numbered,
  receiveExactly,
  receiveOne,
  rejection,
  send,
  seq,
  summary,
  withOpened,
  withReceiver,
} = require("./common");

const SETTINGS = { durability: "sync", testing: { reset: true } };
const TOPICS = [{ name: "t", subscriptions: ["all"] }];
// A broker whose clock a test moves (memory: nothing here is about durability).
const CLOCK = { testing: { clock: "controlled" } };

const MINUTE_MS = 60_000;
const DAY_MS = 24 * 60 * MINUTE_MS;
// Bound on a message's arrival once the clock moved past its time: the rule fired in the move,
// so this is only the delivery. Without the move the wait would be a day.
const ARRIVAL_DEADLINE_MS = 30_000;
// Pause between two looks at what a subscription received.
const POLL_MS = 20;
// The SDK renews a lock itself (for 5 minutes by default) unless told not to.
const NO_RENEWAL = { maxAutoLockRenewalDurationInMs: 0 };
// `aheadMs` is the broker's time less the machine's, read one after the other, so it may fall
// short of the offset by the time between the two reads (a millisecond, more on a loaded machine):
// compared with CLOCK_SLACK_MS, far below the hour the tests move the clock by.

/** `POST /$testing/reset` on `broker`'s administration endpoint: its JSON answer. */
async function reset(broker) {
  const { status, text, json } = await adminCall(broker, "POST", "/$testing/reset");
  assert.equal(status, 200, text);
  return json;
}

/**
 * `method` on `broker`'s administration endpoint at `path`, with `body` as JSON (a string is
 * sent as it is): `{ status, text, json }`, json null when the answer is not JSON.
 */
async function adminCall(broker, method, path, body) {
  const answer = await fetch(`http://127.0.0.1:${broker.adminPort}${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined || typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await answer.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON: the status and text say what it was
  }
  return { status: answer.status, text, json };
}

/** The broker's clock, `GET /$testing/clock`: `{ now, nowMs, aheadMs }`. */
async function brokerNow(broker) {
  const { status, text, json } = await adminCall(broker, "GET", "/$testing/clock");
  assert.equal(status, 200, text);
  return json;
}

/**
 * `POST /$testing/clock/advance` by `by` ("24h", "P1D"): the broker's clock once everything due
 * at the new time has happened, `{ now, nowMs, aheadMs, tookMs }`.
 */
async function advance(broker, by) {
  const { status, text, json } = await adminCall(broker, "POST", "/$testing/clock/advance", { by });
  assert.equal(status, 200, `advance by ${by}: ${text}`);
  return json;
}

/**
 * Starts `receiver` receiving with `subscribe`, credit for two outstanding all the time; what
 * arrives is collected. `next(what)` resolves to the next message that arrives, failing after
 * ARRIVAL_DEADLINE_MS; `close()` stops.
 */
function collecting(receiver) {
  const arrived = [];
  const errors = [];
  let taken = 0;
  const subscription = receiver.subscribe(
    {
      processMessage: async (message) => {
        arrived.push(message);
      },
      processError: async ({ error }) => {
        errors.push(error);
      },
    },
    { maxConcurrentCalls: 2, ...NO_RENEWAL },
  );
  async function next(what) {
    const deadline = Date.now() + ARRIVAL_DEADLINE_MS;
    while (arrived.length <= taken) {
      assert.deepEqual(errors.map(String), [], `the receiver failed waiting for ${what}`);
      assert.ok(Date.now() < deadline, `${what} did not arrive within ${ARRIVAL_DEADLINE_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    return arrived[taken++];
  }
  return { next, close: () => subscription.close() };
}

/** What `receiver` peeks from sequence number 1, the first. */
function peekAll(receiver) {
  return receiver.peekMessages(10, { fromSequenceNumber: Long.ONE });
}

brokerTest(
  "a reset between two tests leaves nothing of the first",
  { settings: SETTINGS, topics: TOPICS },
  async ({ broker, client }) => {
    await send(client, "q1", [{ body: "a" }, { body: "b" }]);
    await send(client, "t", [{ body: "event" }]);
    const sender = client.createSender("q1");
    await sender.scheduleMessages({ body: "tomorrow" }, new Date(Date.now() + 86_400_000));
    await sender.close();
    await withOpened(client.createReceiver("q1"), async (receiver) => {
      const [first] = await receiveExactly(receiver, 1);
      await receiver.deadLetterMessage(first, { deadLetterReason: "test" });
    });

    const answer = await reset(broker);
    assert.equal(answer.entities, 3);

    for (const subQueueType of [undefined, "deadLetter"]) {
      await withOpened(client.createReceiver("q1", { subQueueType }), async (receiver) => {
        assert.deepEqual(await peekAll(receiver), [], `q1 ${subQueueType ?? ""}`);
      });
    }
    await withOpened(client.createReceiver("t", "all"), async (receiver) => {
      assert.deepEqual(await peekAll(receiver), []);
    });
    await send(client, "q1", [{ body: "next test" }]);
    await withOpened(client.createReceiver("q1"), async (receiver) => {
      const [next] = await receiveExactly(receiver, 1);
      assert.equal(next.body, "next test");
      assert.equal(Number(next.sequenceNumber), 1, "numbered from 1 again");
      await receiver.completeMessage(next);
    });
  },
);

// --- the controlled clock --------------------------------------------------------------------

brokerTest(
  "a message scheduled a day ahead arrives on a 24h advance, enqueued at the broker's new time",
  { settings: CLOCK },
  async ({ broker, client }) => {
    const sender = client.createSender("q1");
    try {
      await withReceiver(client, "q1", async (receiver) => {
        const arrivals = collecting(receiver);
        try {
          // A primer through the same receiver: once it arrived the link is attached, with one
          // of its two credits still outstanding for the scheduled message.
          await sender.sendMessages({ body: "primer", messageId: "primer" });
          assert.equal((await arrivals.next("the primer")).messageId, "primer");

          const before = await brokerNow(broker);
          const due = new Date(before.nowMs + DAY_MS);
          const [number] = await sender.scheduleMessages(numbered("day", 0), due);
          const [held] = await receiver.peekMessages(1, { fromSequenceNumber: number });
          assert.deepEqual([held?.messageId, held?.state], ["day-0", "scheduled"]);

          const moved = await advance(broker, "24h");
          assert.ok(
            moved.nowMs >= due.getTime(),
            `advanced to ${moved.now}, before ${due.toISOString()}`,
          );
          const message = await arrivals.next("the message scheduled a day ahead");
          assert.equal(message.messageId, "day-0");
          assert.equal(message.state, "scheduled", "delivered as a message held until its time");
          const enqueued = message.enqueuedTimeUtc.getTime();
          assert.ok(
            due.getTime() <= enqueued && enqueued <= moved.nowMs,
            `enqueued (activated) at ${message.enqueuedTimeUtc.toISOString()}: not the broker's ` +
              `new time, between the due time ${due.toISOString()} and the advance's answer ` +
              `${moved.now}`,
          );
        } finally {
          await arrivals.close();
        }
      });
    } finally {
      await sender.close();
    }
  },
);

brokerTest(
  "a message with a day's time to live is dead-lettered (TTLExpiredException) on a 1d 1s advance",
  {
    settings: CLOCK,
    queues: [{ name: "q1", dead_lettering_on_message_expiration: true }],
  },
  async ({ broker, client }) => {
    await send(client, "q1", numbered("ttl", 0, { timeToLive: DAY_MS }));
    await withOpened(client.createReceiver("q1"), async (receiver) => {
      const [alive] = await peekAll(receiver);
      assert.deepEqual([alive?.messageId, alive?.state], ["ttl-0", "active"]);
      assert.equal(alive.expiresAtUtc.getTime() - alive.enqueuedTimeUtc.getTime(), DAY_MS);

      const moved = await advance(broker, "P1DT1S");
      assert.ok(moved.nowMs > alive.expiresAtUtc.getTime(), `advanced only to ${moved.now}`);
      assert.deepEqual(await peekAll(receiver), [], "the main queue after the advance");
    });
    await withOpened(client.createReceiver("q1", { subQueueType: "deadLetter" }), async (dlq) => {
      const dead = await peekAll(dlq);
      assert.deepEqual(
        dead.map((m) => [m.messageId, m.deadLetterReason]),
        [["ttl-0", "TTLExpiredException"]],
        "the dead-letter queue after the advance",
      );
      assert.deepEqual(summary(dead[0]).slice(0, 2), expectedSummary("ttl", 0).slice(0, 2));
    });
  },
);

brokerTest(
  "a 5-minute lock is lost on a 5m advance and the message comes back with deliveryCount 1",
  { settings: CLOCK, queues: [{ name: "q1", lock_duration: "5m" }] },
  async ({ broker, client }) => {
    await send(client, "q1", numbered("lock", 0));
    const first = await withReceiver(client, "q1", NO_RENEWAL, async (receiver) => {
      const before = await brokerNow(broker);
      const message = await receiveOne(receiver);
      const after = await brokerNow(broker);
      const lockedUntil = message.lockedUntilUtc.getTime();
      assert.ok(
        before.nowMs + 5 * MINUTE_MS <= lockedUntil && lockedUntil <= after.nowMs + 5 * MINUTE_MS,
        `locked until ${message.lockedUntilUtc.toISOString()}: not 5 minutes from the receive, ` +
          `between ${before.now} and ${after.now} on the broker's clock`,
      );
      assert.equal(message.deliveryCount, 0);

      const moved = await advance(broker, "5m");
      assert.ok(
        moved.nowMs > message.lockedUntilUtc.getTime(),
        `advanced to ${moved.now}, not past the lock's end ${message.lockedUntilUtc.toISOString()}`,
      );
      const error = await rejection(
        receiver.completeMessage(message),
        "a complete after the advance",
      );
      assert.equal(error.code, "MessageLockLost", `${error.code}: ${error.message}`);
      return message;
    });

    await withReceiver(client, "q1", NO_RENEWAL, async (receiver) => {
      const again = await receiveOne(receiver);
      assert.deepEqual(summary(again), summary(first));
      assert.equal(seq(again), seq(first), "the same message");
      assert.equal(again.deliveryCount, 1, "deliveryCount after the lost lock");
      await receiver.completeMessage(again);
    });
  },
);

brokerTest(
  "a queue idle for 10 minutes is gone once a 10m advance answers",
  { settings: CLOCK, queues: ["q1", { name: "idle", auto_delete_on_idle: "10m" }] },
  async ({ broker, client }) => {
    // Used, then left alone: no link stays open on it.
    await send(client, "idle", numbered("idle", 0));
    await withOpened(client.createReceiver("idle"), async (receiver) => {
      const [message] = await peekAll(receiver);
      assert.equal(message?.messageId, "idle-0");
    });

    await advance(broker, "10m");
    const sender = client.createSender("idle");
    const sendError = await rejection(
      sender.sendMessages(numbered("idle", 1)),
      "a send after the advance",
    );
    await sender.close();
    assert.equal(
      sendError.code,
      "MessagingEntityNotFound",
      `${sendError.code}: ${sendError.message}`,
    );
    const receiver = client.createReceiver("idle");
    const receiveError = await rejection(
      receiver.receiveMessages(1, { maxWaitTimeInMs: ARRIVAL_DEADLINE_MS }),
      "a receive after the advance",
    );
    await receiver.close();
    assert.equal(
      receiveError.code,
      "MessagingEntityNotFound",
      `${receiveError.code}: ${receiveError.message}`,
    );
    // The other queue had no auto-delete: still there.
    await send(client, "q1", numbered("kept", 0));
  },
);

brokerTest(
  "a reset in a beforeEach leaves the clock where an earlier test moved it",
  { settings: { testing: { reset: true, clock: "controlled" } } },
  async ({ broker, client }) => {
    // The earlier test.
    const moved = await advance(broker, "1h");
    assert.ok(
      moved.aheadMs >= 60 * MINUTE_MS - CLOCK_SLACK_MS,
      `an hour ahead, said ${JSON.stringify(moved)}`,
    );
    await send(client, "q1", numbered("earlier", 0));

    // The next test's beforeEach.
    await reset(broker);
    const after = await brokerNow(broker);
    assert.ok(
      after.nowMs >= moved.nowMs && after.aheadMs >= moved.aheadMs - CLOCK_SLACK_MS,
      `after the reset the clock is at ${after.now}, ${after.aheadMs} ms ahead; the advance ` +
        `left it at ${moved.now}, ${moved.aheadMs} ms ahead`,
    );

    // The next test: an empty queue, whose new messages are enqueued on the broker's clock.
    await send(client, "q1", numbered("next", 0));
    await withOpened(client.createReceiver("q1"), async (receiver) => {
      const peeked = await peekAll(receiver);
      assert.deepEqual(peeked.map((m) => m.messageId), ["next-0"]);
      assert.ok(
        peeked[0].enqueuedTimeUtc.getTime() >= after.nowMs,
        `enqueued at ${peeked[0].enqueuedTimeUtc.toISOString()}, before the broker's ${after.now}`,
      );
    });
  },
);

brokerTest(
  "a move of the clock with a bad body is 400, one to a past time 409, and neither moves it",
  { settings: CLOCK },
  async ({ broker }) => {
    const start = await advance(broker, "1h");
    const badMoves = [
      ["/$testing/clock/advance", { by: "soon" }],
      ["/$testing/clock/advance", "not json"],
      ["/$testing/clock/advance", {}],
      ["/$testing/clock/advance", { by: -60 }],
      ["/$testing/clock/advance", { to: "2100-01-01T00:00:00Z" }],
      ["/$testing/clock/advance", { by: "1h", when: "now" }],
      ["/$testing/clock", { to: "tomorrow" }],
      ["/$testing/clock", { by: "1h" }],
    ];
    for (const [path, body] of badMoves) {
      const { status, text } = await adminCall(broker, "POST", path, body);
      assert.equal(status, 400, `POST ${path} ${JSON.stringify(body)}: ${text}`);
    }
    const past = [
      "2020-01-01T00:00:00Z",
      // A millisecond before the broker's time, still after the machine's.
      new Date(start.nowMs - 1).toISOString(),
    ];
    for (const to of past) {
      const { status, text } = await adminCall(broker, "POST", "/$testing/clock", { to });
      assert.equal(status, 409, `POST /$testing/clock to ${to}: ${text}`);
      assert.match(text, /never goes back/, to);
    }
    const end = await brokerNow(broker);
    assert.ok(
      Math.abs(end.aheadMs - start.aheadMs) <= CLOCK_SLACK_MS,
      `the clock moved: ${start.aheadMs} ms ahead before the refused moves, ${end.aheadMs} after`,
    );
  },
);
