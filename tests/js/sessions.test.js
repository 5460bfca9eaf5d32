"use strict";
// Message sessions against @azure/service-bus: `acceptSession` and `acceptNextSession`, order
// within a session, session state, lock renewal, a session held by another receiver
// (`SessionCannotBeLocked`), and no session available in time; the JavaScript side of
// tests/python/test_sessions.py.

const assert = require("node:assert/strict");

const { ServiceBusClient } = require("@azure/service-bus");

const {
  brokerTest,
  ids,
  receiveExactly,
  rejection,
  send,
  waitUntilPast,
  withOpened,
} = require("./common");

const QUEUES = [{ name: "sq", requires_session: true }, "plain"];

const inSession = (sessionId, index) => ({
  body: `${sessionId} body ${index}`,
  messageId: `${sessionId}-${index}`,
  sessionId,
});

brokerTest(
  "a named session receiver gets only its session's messages, in order",
  { queues: QUEUES },
  async ({ client }) => {
    await send(client, "sq", [
      inSession("a", 0),
      inSession("b", 0),
      inSession("a", 1),
      inSession("b", 1),
    ]);
    await withOpened(client.acceptSession("sq", "b"), async (receiver) => {
      assert.equal(receiver.sessionId, "b");
      assert.ok(receiver.sessionLockedUntilUtc > new Date(), String(receiver.sessionLockedUntilUtc));
      const got = await receiveExactly(receiver, 2);
      assert.deepEqual(ids(got), ["b-0", "b-1"]);
      assert.deepEqual(
        got.map((message) => message.sessionId),
        ["b", "b"],
      );
      for (const message of got) await receiver.completeMessage(message);
    });
  },
);

brokerTest(
  "acceptNextSession takes the session with the oldest message, and a held one cannot be accepted",
  { queues: QUEUES },
  async ({ client }) => {
    await send(client, "sq", [inSession("first", 0), inSession("second", 0)]);
    await withOpened(client.acceptNextSession("sq"), async (first) => {
      assert.equal(first.sessionId, "first");
      const error = await rejection(client.acceptSession("sq", "first"), "accepting a held session");
      assert.equal(error.code, "SessionCannotBeLocked", String(error));
      await withOpened(client.acceptNextSession("sq"), async (second) => {
        assert.equal(second.sessionId, "second");
        assert.deepEqual(ids(await receiveExactly(second, 1)), ["second-0"]);
      });
      assert.deepEqual(ids(await receiveExactly(first, 1)), ["first-0"]);
    });
  },
);

brokerTest(
  "acceptNextSession with no session available fails once its time is up",
  { queues: QUEUES },
  async ({ broker }) => {
    // The SDK waits as long as its operation timeout: a client of its own with a short one.
    const impatient = new ServiceBusClient(broker.connectionString, {
      retryOptions: { maxRetries: 0, timeoutInMs: 3_000 },
    });
    try {
      const started = Date.now();
      const error = await rejection(
        impatient.acceptNextSession("sq"),
        "accepting a session from an empty queue",
      );
      assert.equal(error.code, "ServiceTimeout", String(error));
      assert.ok(Date.now() - started >= 2_500, "it waited for a session first");
    } finally {
      await impatient.close();
    }
  },
);

brokerTest(
  "session state is set, read back by a later receiver, and cleared",
  { queues: QUEUES },
  async ({ client }) => {
    await withOpened(client.acceptSession("sq", "s"), async (receiver) => {
      assert.equal(await receiver.getSessionState(), null);
      await receiver.setSessionState("checkpoint 7");
      const renewed = await receiver.renewSessionLock();
      assert.ok(renewed > new Date(), String(renewed));
    });
    await withOpened(client.acceptSession("sq", "s"), async (receiver) => {
      const state = await receiver.getSessionState();
      assert.equal(Buffer.from(state).toString(), "checkpoint 7");
      await receiver.setSessionState(null);
      assert.equal(await receiver.getSessionState(), null);
    });
  },
);

brokerTest(
  "a message without a session id is refused, and a session receiver on a plain queue too",
  { queues: QUEUES },
  async ({ client }) => {
    const error = await rejection(send(client, "sq", { body: "none" }), "a send without session id");
    assert.match(String(error), /SessionId/);
    await rejection(client.acceptSession("plain", "s"), "a session receiver on a plain queue");
  },
);

brokerTest(
  "a session lock that lapses loses the session: settling then fails with SessionLockLost",
  { queues: [{ name: "short", requires_session: true, lock_duration: "2s" }] },
  async ({ client }) => {
    await send(client, "short", [inSession("s", 0), inSession("s", 1)]);
    // No automatic renewal: the lock must lapse.
    const accept = client.acceptSession("short", "s", { maxAutoLockRenewalDurationInMs: 0 });
    await withOpened(accept, async (receiver) => {
      const [first] = await receiveExactly(receiver, 1);
      await waitUntilPast(receiver.sessionLockedUntilUtc);
      const error = await rejection(receiver.completeMessage(first), "completing after the lapse");
      assert.equal(error.code, "SessionLockLost", String(error));
    });
    // Free again: the message comes back first, its delivery counted.
    await withOpened(client.acceptSession("short", "s"), async (receiver) => {
      const back = await receiveExactly(receiver, 2);
      assert.deepEqual(ids(back), ["s-0", "s-1"]);
      assert.equal(back[0].deliveryCount, 1);
      for (const message of back) await receiver.completeMessage(message);
    });
  },
);

brokerTest(
  "a topic's session-enabled subscription is read through acceptSession",
  { topics: [{ name: "t", subscriptions: [{ name: "ordered", requires_session: true }] }] },
  async ({ client }) => {
    await send(client, "t", [inSession("s", 0), inSession("s", 1)]);
    await withOpened(client.acceptSession("t", "ordered", "s"), async (receiver) => {
      const got = await receiveExactly(receiver, 2);
      assert.deepEqual(ids(got), ["s-0", "s-1"]);
      for (const message of got) await receiver.completeMessage(message);
    });
  },
);
