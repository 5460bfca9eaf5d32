"use strict";
// Shared access signatures and TLS against @azure/service-bus: the emulator's connection string
// with anonymous clients refused, a wrong key refused (UnauthorizedAccess), and the SDK over TLS
// trusting a `tidebus gen-cert` CA through NODE_EXTRA_CA_CERTS; the JavaScript side of
// tests/python/test_security.py.

const assert = require("node:assert/strict");
const { execFile } = require("node:child_process");
const util = require("node:util");

const { ServiceBusClient } = require("@azure/service-bus");

const {
  brokerTest,
  generateCertificates,
  numbered,
  receiveExactly,
  rejection,
  send,
} = require("./common");

const SECURED = { settings: { allow_anonymous: false } };
const CHILD_DEADLINE_MS = 60_000;

brokerTest(
  "the emulator connection string works with anonymous clients refused",
  SECURED,
  async ({ client }) => {
    await send(client, "q1", [numbered("verified", 0)]);
    const receiver = client.createReceiver("q1");
    try {
      const [message] = await receiveExactly(receiver, 1);
      assert.equal(message.messageId, "verified-0");
      await receiver.completeMessage(message);
      assert.deepEqual(await receiver.peekMessages(5), []);
    } finally {
      await receiver.close();
    }
  },
);

brokerTest("a wrong key is refused with UnauthorizedAccess", SECURED, async ({ broker, client }) => {
  const forger = new ServiceBusClient(
    broker.connectionString.replace("SAS_KEY_VALUE", "not-the-key"),
    { retryOptions: { maxRetries: 0, timeoutInMs: 20_000 } },
  );
  try {
    const sender = forger.createSender("q1");
    const error = await rejection(sender.sendMessages({ body: "forged" }), "a forged send");
    assert.equal(error.code, "UnauthorizedAccess", util.inspect(error));
    assert.match(error.message, /does not verify/);
  } finally {
    await forger.close();
  }
  const receiver = client.createReceiver("q1");
  try {
    assert.deepEqual(await receiver.receiveMessages(1, { maxWaitTimeInMs: 1_000 }), []);
  } finally {
    await receiver.close();
  }
});

// What the child process runs: a client on `Endpoint=sb://localhost:<TLS port>` without the
// emulator flag (so amqps), sending three messages, receiving, settling and peeking.
const TLS_CLIENT = `
const { ServiceBusClient } = require("@azure/service-bus");
(async () => {
  const client = new ServiceBusClient(process.env.CONNECTION_STRING,
    { retryOptions: { maxRetries: 0, timeoutInMs: 20000 } });
  try {
    const sender = client.createSender("q1");
    await sender.sendMessages([0, 1, 2].map((i) => ({ body: "over TLS " + i, messageId: "tls-" + i })));
    const receiver = client.createReceiver("q1");
    const got = [];
    const deadline = Date.now() + 30000;
    while (got.length < 3 && Date.now() < deadline) {
      got.push(...await receiver.receiveMessages(3 - got.length, { maxWaitTimeInMs: 5000 }));
    }
    await receiver.renewMessageLock(got[0]);
    await receiver.completeMessage(got[0]);
    await receiver.abandonMessage(got[1]);
    await receiver.deadLetterMessage(got[2], { deadLetterReason: "tls-test" });
    const left = await receiver.peekMessages(5);
    console.log(JSON.stringify({ got: got.map((m) => m.messageId), left: left.map((m) => m.messageId) }));
  } finally {
    await client.close();
  }
})().catch((error) => { console.error(error.code, error.message); process.exit(1); });
`;

/** Runs TLS_CLIENT in a child node with `env` added; resolves to `{ code, stdout, stderr }`. */
function runClient(env) {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["-e", TLS_CLIENT],
      { env: { ...process.env, ...env }, timeout: CHILD_DEADLINE_MS },
      (error, stdout, stderr) => resolve({ code: error ? error.code ?? error.signal : 0, stdout, stderr }),
    );
  });
}

const certificates = generateCertificates();

brokerTest(
  "the SDK over TLS trusts the generated CA through NODE_EXTRA_CA_CERTS",
  {
    settings: {
      allow_anonymous: false,
      tls: { listen: "127.0.0.1:0", cert: certificates.cert, key: certificates.key },
    },
  },
  async ({ broker }) => {
    assert.ok(broker.tlsPort, "the ready file names the TLS listener");
    const connectionString =
      `Endpoint=sb://localhost:${broker.tlsPort}/;` +
      "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE";
    const untrusted = await runClient({ CONNECTION_STRING: connectionString });
    assert.notEqual(untrusted.code, 0, "a client that does not trust the CA connected");
    assert.match(untrusted.stderr, /certificate|self.signed|UNABLE_TO_VERIFY/i, untrusted.stderr);
    const trusting = await runClient({
      CONNECTION_STRING: connectionString,
      NODE_EXTRA_CA_CERTS: certificates.ca,
    });
    assert.equal(trusting.code, 0, trusting.stderr);
    const outcome = JSON.parse(trusting.stdout.trim().split("\n").pop());
    assert.deepEqual(outcome.got, ["tls-0", "tls-1", "tls-2"]);
    assert.deepEqual(outcome.left, ["tls-1"], "abandoned stays, completed and dead-lettered go");
  },
);
