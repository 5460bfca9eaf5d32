"use strict";
// Deferred and dead-lettered messages and the delivery count against @azure/service-bus, on a
// queue, a topic's subscription and a session-enabled subscription.
//
// Service Bus counts a delivery when its lock ends without the message being settled for good:
// abandoned, expired, or deferred (the .NET SDK's documentation of DeliveryCount; the JavaScript
// SDK's own live suites: `test/public/deferredMessage.spec.ts` and
// `test/internal/batchReceiver.spec.ts`). Dead-lettering settles the message: it reaches the
// dead-letter queue with the count it had, 0 for one received once, 1 for one deferred and then
// received by its sequence number.

const assert = require("node:assert/strict");

const { brokerTest, numbered, receiveOne, send, withOpened } = require("./common");

const TOPICS = [
  { name: "t", subscriptions: ["plain"] },
  { name: "st", subscriptions: [{ name: "ordered", requires_session: true }] },
];

/** Where a test sends and receives: a queue, a subscription, a session-enabled subscription. */
const PLACES = [
  { kind: "queue", entity: "q1", receiver: (client, options) => client.createReceiver("q1", options) },
  {
    kind: "subscription",
    entity: "t",
    receiver: (client, options) => client.createReceiver("t", "plain", options),
  },
  {
    kind: "session subscription",
    entity: "st",
    session: "s",
    receiver: (client, options) =>
      options.subQueueType
        ? client.createReceiver("st", "ordered", options)
        : client.acceptSession("st", "ordered", "s", options),
  },
];

/** The one message of `place`'s dead-letter queue, completed. */
async function deadLettered(client, place) {
  return withOpened(place.receiver(client, { subQueueType: "deadLetter" }), async (receiver) => {
    const message = await receiveOne(receiver);
    await receiver.completeMessage(message);
    return message;
  });
}

for (const place of PLACES) {
  const message = (tag) => numbered(tag, 0, place.session ? { sessionId: place.session } : {});

  brokerTest(
    `${place.kind}: a message received once and dead-lettered keeps delivery count 0`,
    { topics: TOPICS },
    async ({ client }) => {
      await send(client, place.entity, message("once"));
      await withOpened(place.receiver(client, {}), async (receiver) => {
        const first = await receiveOne(receiver);
        assert.deepEqual([first.messageId, first.deliveryCount], ["once-0", 0]);
        await receiver.deadLetterMessage(first);
      });
      const dead = await deadLettered(client, place);
      assert.deepEqual([dead.messageId, dead.deliveryCount], ["once-0", 0]);
    },
  );

  brokerTest(
    `${place.kind}: a deferred message counts its deferral, and dead-lettered keeps that count`,
    { topics: TOPICS },
    async ({ client }) => {
      await send(client, place.entity, message("deferred"));
      await withOpened(place.receiver(client, {}), async (receiver) => {
        const first = await receiveOne(receiver);
        assert.equal(first.deliveryCount, 0);
        await receiver.deferMessage(first);
        const [again] = await receiver.receiveDeferredMessages(first.sequenceNumber);
        assert.deepEqual(
          [again.messageId, again.state, again.deliveryCount],
          ["deferred-0", "deferred", 1],
        );
        await receiver.deadLetterMessage(again);
      });
      const dead = await deadLettered(client, place);
      assert.deepEqual([dead.messageId, dead.deliveryCount], ["deferred-0", 1]);
    },
  );

  brokerTest(
    `${place.kind}: a deferred message deferred or abandoned again counts once more`,
    { topics: TOPICS },
    async ({ client }) => {
      await send(client, place.entity, [message("again"), { ...message("again"), messageId: "again-1" }]);
      await withOpened(place.receiver(client, {}), async (receiver) => {
        const received = [await receiveOne(receiver), await receiveOne(receiver)];
        for (const first of received) await receiver.deferMessage(first);
        const numbers = received.map((m) => m.sequenceNumber);
        const once = await receiver.receiveDeferredMessages(numbers);
        assert.deepEqual(once.map((m) => m.deliveryCount), [1, 1]);
        await receiver.deferMessage(once[0]);
        await receiver.abandonMessage(once[1]);
        const twice = await receiver.receiveDeferredMessages(numbers);
        assert.deepEqual(
          twice.map((m) => [m.messageId, m.state, m.deliveryCount]),
          [
            ["again-0", "deferred", 2],
            ["again-1", "deferred", 2],
          ],
        );
        for (const m of twice) await receiver.completeMessage(m);
      });
    },
  );
}
