"use strict";
// The JavaScript SDK's half of the JMS interop tests (@azure/service-bus, from NODE_PATH): a
// script tests/jms's InteropTest runs as a subprocess against the broker that suite started
// (tests/jms/run.sh; `cargo test` runs it through tests/broker/jms_interop.rs).
//
//   node interop.js receive-jms QUEUE KIND=JMSMessageID...
//       receives the JMS text and bytes messages InteropTest sent to QUEUE and asserts what the
//       SDK shows of each; exits 1 with the mismatch otherwise.
//   node interop.js send QUEUE
//       sends the SDK messages whose JMS view InteropTest asserts.
//
// The broker is TIDEBUS_AMQP_URL (amqp://127.0.0.1:PORT), reached with the emulator's
// connection string. What is asserted, and where it is documented, is in InteropTest's class
// comment: Service Bus's property mapping (messageId, correlationId, subject, replyTo, to,
// contentType, timeToLive, applicationProperties as the AMQP fields of the same names:
// https://learn.microsoft.com/azure/service-bus-messaging/service-bus-messages-payloads) and the
// AMQP JMS mapping Qpid JMS writes. How the SDK encodes and decodes bodies is its own: a body
// that is not a Buffer is JSON in a data section; a received data section that is not JSON
// stays a Buffer.

const assert = require("node:assert/strict");

const { ServiceBusClient } = require("@azure/service-bus");

// The client's `retryOptions.timeoutInMs` and a receive's `maxWaitTimeInMs`.
const OPERATION_TIMEOUT_MS = 20_000;
const RECEIVE_WAIT_MS = 5_000;

function client() {
  const port = new URL(process.env.TIDEBUS_AMQP_URL).port;
  return new ServiceBusClient(
    `Endpoint=sb://localhost:${port};SharedAccessKeyName=RootManageSharedAccessKey;` +
      "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
    { retryOptions: { maxRetries: 0, timeoutInMs: OPERATION_TIMEOUT_MS } },
  );
}

// The typed application properties InteropTest sets on every JMS message.
const PROPERTIES = { count: 7, big: 2 ** 40, flag: true, ratio: 1.5 };

async function receiveJms(queue, ids) {
  const sb = client();
  try {
    const receiver = sb.createReceiver(queue);
    const seen = {};
    const deadline = Date.now() + 30_000;
    while (Object.keys(seen).length < Object.keys(ids).length && Date.now() < deadline) {
      for (const message of await receiver.receiveMessages(10, { maxWaitTimeInMs: RECEIVE_WAIT_MS })) {
        seen[message.applicationProperties.kind] = message;
        await receiver.completeMessage(message);
      }
    }
    assert.deepEqual(Object.keys(seen).sort(), Object.keys(ids).sort(), "the kinds received");
    for (const [kind, message] of Object.entries(seen)) {
      const raw = message._rawAmqpMessage;
      console.log(
        `${kind}: body=${JSON.stringify(message.body)} bodyType=${raw.bodyType} messageId=${message.messageId} ` +
          `subject=${message.subject} correlationId=${message.correlationId} replyTo=${message.replyTo} ` +
          `to=${message.to} contentType=${message.contentType} timeToLive=${message.timeToLive} ` +
          `applicationProperties=${JSON.stringify(message.applicationProperties)} ` +
          `annotations=${JSON.stringify(raw.messageAnnotations)}`,
      );
      assert.equal(message.messageId, ids[kind], `${kind}: messageId (JMSMessageID)`);
      assert.equal(message.subject, `type-${kind}`, `${kind}: subject (JMSType)`);
      assert.equal(message.correlationId, `corr-${kind}`, `${kind}: correlationId (JMSCorrelationID)`);
      assert.equal(message.replyTo, "interop-replies", `${kind}: replyTo (JMSReplyTo)`);
      assert.equal(message.to, queue, `${kind}: to (JMSDestination)`);
      assert.equal(message.timeToLive, 600_000, `${kind}: timeToLive`);
      assert.deepEqual({ ...message.applicationProperties }, { kind, ...PROPERTIES }, `${kind}: applicationProperties`);
      if (kind === "Text") {
        // An amqp-value string: the SDK's body is the string itself.
        assert.equal(raw.bodyType, "value", "Text: bodyType");
        assert.equal(message.body, "text for javascript", "Text: body");
        assert.equal(raw.messageAnnotations["x-opt-jms-msg-type"], 5, "Text: x-opt-jms-msg-type");
      } else {
        // A data section that is not JSON: a Buffer of its bytes.
        assert.equal(raw.bodyType, "data", "Bytes: bodyType");
        assert.deepEqual(message.body, Buffer.from([1, 2, 3, 0xff]), "Bytes: body");
        assert.equal(message.contentType, "application/octet-stream", "Bytes: contentType");
        assert.equal(raw.messageAnnotations["x-opt-jms-msg-type"], 3, "Bytes: x-opt-jms-msg-type");
      }
    }
    console.log(`the JavaScript SDK read the ${Object.keys(seen).length} JMS messages right`);
  } finally {
    await sb.close();
  }
}

async function send(queue) {
  const sb = client();
  try {
    const sender = sb.createSender(queue);
    const messages = [
      {
        body: "js string body",
        messageId: "js-str",
        correlationId: "js-corr",
        subject: "js-subject",
        replyTo: "interop-replies",
        applicationProperties: { color: "green", n: 5, flag: false, ratio: 0.75 },
      },
      { body: Buffer.from([0, 1, 2, 0xff]), messageId: "js-buffer" },
      // An AmqpAnnotatedMessage with a value body: an amqp-value string on the wire.
      {
        body: "js value body",
        bodyType: "value",
        properties: { messageId: "js-value", subject: "js-value-subject" },
      },
    ];
    // One at a time, so they are enqueued (and received) in this order.
    for (const message of messages) await sender.sendMessages(message);
    console.log(`sent ${messages.length} messages to ${queue}`);
  } finally {
    await sb.close();
  }
}

async function main() {
  const [command, queue, ...rest] = process.argv.slice(2);
  if (command === "receive-jms") {
    await receiveJms(queue, Object.fromEntries(rest.map((argument) => argument.split(/=(.*)/s, 2))));
  } else if (command === "send") {
    await send(queue);
  } else {
    throw new Error(`unknown command ${command}; see the comment at the top`);
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
