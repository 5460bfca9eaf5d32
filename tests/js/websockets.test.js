"use strict";
// AMQP over WebSockets through @azure/service-bus with `webSocketOptions` and the `ws` package;
// the JavaScript side of tests/python/test_websockets.py.
//
// With `webSocketOptions` the SDK always dials `wss://HOST:PORT/$servicebus/websocket`, PORT from
// the connection string's endpoint or else 443, emulator flag or not (core-amqp's
// ConnectionContextBase), so every broker here has TLS on with a `tidebus gen-cert` certificate.
// `ws` takes the CA as its `ca` option (the SDK hands `webSocketConstructorOptions` to it), so
// the SDK runs in this process, unlike security.test.js where plain AMQPS needs
// NODE_EXTRA_CA_CERTS. Every broker refuses anonymous clients, so each client puts its token
// through CBS over the WebSocket. Each test sends, receives and settles (complete, abandon,
// dead-letter), peeks, schedules and cancels (the management link), and uses a session and its
// state, over:
//
// - wss to the TLS port, its port in the connection string;
// - wss to a `websocket_listen` listener on 127.0.0.1:443, the connection string without a
//   port, so the SDK picks 443 itself (tests run as root on the project's machines).

const assert = require("node:assert/strict");
const fs = require("node:fs");

const { ServiceBusClient } = require("@azure/service-bus");
const WebSocket = require("ws");

const {
  brokerTest,
  generateCertificates,
  receiveExactly,
  receiveOne,
  withReceiver,
} = require("./common");

const QUEUES = ["q1", { name: "sq", requires_session: true }];
const OPERATION_TIMEOUT_MS = 20_000;
const AN_HOUR_MS = 60 * 60 * 1000;

const certificates = generateCertificates();

/** Broker settings: anonymous clients refused, TLS with the generated certificate, `more`. */
function secured(more = {}) {
  const tls = { listen: "127.0.0.1:0", cert: certificates.cert, key: certificates.key };
  return { settings: { allow_anonymous: false, tls, ...more }, queues: QUEUES };
}

/** The connection string of a real namespace (no emulator flag) at `localhost<port>`. */
function connectionString(port) {
  return (
    `Endpoint=sb://localhost${port}/;` +
    "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
  );
}

/**
 * A client over `ws` trusting the generated CA, and `dialed`, the URLs the SDK opened. `family:
 * 4` because the brokers listen on 127.0.0.1 only and where `localhost` also names ::1 Node may
 * dial that first.
 */
function openWebSocketClient(connection) {
  const dialed = [];
  class RecordingWebSocket extends WebSocket {
    constructor(url, ...rest) {
      dialed.push(String(url));
      super(url, ...rest);
    }
  }
  const client = new ServiceBusClient(connection, {
    webSocketOptions: {
      webSocket: RecordingWebSocket,
      webSocketConstructorOptions: { ca: fs.readFileSync(certificates.ca), family: 4 },
    },
    retryOptions: { maxRetries: 0, timeoutInMs: OPERATION_TIMEOUT_MS },
  });
  return { client, dialed };
}

/** Send, schedule and cancel, peek, settle, the dead-letter queue, a session and its state. */
async function exercise(client, tag) {
  const bodies = [0, 1, 2].map((i) => `${tag} ${i}`);
  const sender = client.createSender("q1");
  try {
    await sender.sendMessages(bodies.map((body) => ({ body })));
    const [scheduled] = await sender.scheduleMessages(
      { body: `${tag} later` },
      new Date(Date.now() + AN_HOUR_MS),
    );
    await sender.cancelScheduledMessages(scheduled);
  } finally {
    await sender.close();
  }
  await withReceiver(client, "q1", async (receiver) => {
    const peeked = await receiver.peekMessages(5);
    assert.deepEqual(peeked.map((m) => m.body), bodies, "the cancelled one is gone");
    const [first, second, third] = await receiveExactly(receiver, 3);
    assert.deepEqual([first.body, second.body, third.body], bodies);
    await receiver.completeMessage(first);
    await receiver.abandonMessage(second);
    await receiver.deadLetterMessage(third, { deadLetterReason: tag });
    const again = await receiveOne(receiver);
    assert.deepEqual([again.body, again.deliveryCount], [bodies[1], 1]);
    await receiver.completeMessage(again);
  });
  await withReceiver(client, "q1", { subQueueType: "deadLetter" }, async (dead) => {
    const letter = await receiveOne(dead);
    assert.deepEqual([letter.body, letter.deadLetterReason], [bodies[2], tag]);
    await dead.completeMessage(letter);
  });
  const sessionId = `${tag} session`;
  const sessionSender = client.createSender("sq");
  try {
    await sessionSender.sendMessages([0, 1].map((i) => ({ body: `${tag} s${i}`, sessionId })));
  } finally {
    await sessionSender.close();
  }
  const session = await client.acceptSession("sq", sessionId);
  try {
    await session.setSessionState(tag);
    assert.equal(Buffer.from(await session.getSessionState()).toString(), tag);
    const got = await receiveExactly(session, 2);
    assert.deepEqual(got.map((m) => m.body), [`${tag} s0`, `${tag} s1`]);
    for (const message of got) await session.completeMessage(message);
  } finally {
    await session.close();
  }
}

/** Runs `exercise` on a WebSocket client; resolves to the URLs it dialed. */
async function exerciseOverWebSocket(connection, tag) {
  const { client, dialed } = openWebSocketClient(connection);
  try {
    await exercise(client, tag);
  } finally {
    await client.close();
  }
  return dialed;
}

brokerTest(
  "wss to the TLS port carries CBS, settlement, management and sessions",
  secured(),
  async ({ broker }) => {
    assert.ok(broker.tlsPort, "the ready file names the TLS listener");
    const dialed = await exerciseOverWebSocket(connectionString(`:${broker.tlsPort}`), "wss tls");
    const url = `wss://localhost:${broker.tlsPort}/$servicebus/websocket`;
    assert.ok(dialed.length > 0 && dialed.every((d) => d === url), dialed.join(", "));
    const log = broker.readLog();
    assert.ok(log.includes("tls=true") && log.includes("websocket=true"), "TLS and WebSockets");
  },
);

brokerTest(
  "wss on a 443 listener, the connection string without a port",
  secured({ websocket_listen: ["127.0.0.1:443"] }),
  async ({ broker }) => {
    assert.deepEqual(broker.websocketAddresses, [{ host: "127.0.0.1", port: 443 }]);
    const dialed = await exerciseOverWebSocket(connectionString(""), "wss 443");
    const url = "wss://localhost:443/$servicebus/websocket";
    assert.ok(dialed.length > 0 && dialed.every((d) => d === url), dialed.join(", "));
    assert.ok(broker.readLog().includes("websocket=true"), "the connections were WebSockets");
  },
);
