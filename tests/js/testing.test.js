"use strict";
// `[testing] reset` against @azure/service-bus: a reset between two tests leaves nothing of the
// first (active, scheduled and dead-lettered messages, a subscription's copies), and the queue
// numbers from 1 again. The call is the administration endpoint's `POST /$testing/reset`, as a
// test suite's `beforeEach` would make it (anonymous clients are let in here).

const assert = require("node:assert/strict");
const Long = require("long");

const { brokerTest, receiveExactly, send, withOpened } = require("./common");

const SETTINGS = { durability: "sync", testing: { reset: true } };
const TOPICS = [{ name: "t", subscriptions: ["all"] }];

/** `POST /$testing/reset` on `broker`'s administration endpoint: its JSON answer. */
async function reset(broker) {
  const answer = await fetch(`http://127.0.0.1:${broker.adminPort}/$testing/reset`, {
    method: "POST",
  });
  const text = await answer.text();
  assert.equal(answer.status, 200, text);
  return JSON.parse(text);
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
