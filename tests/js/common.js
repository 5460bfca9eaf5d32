"use strict";
// What the @azure/service-bus suites share (the JavaScript twin of tests/python/conftest.py and
// sb_common.py): a broker and client per test, messages, bounded steps.
//
// Every wait is bounded: the client's `retryOptions.timeoutInMs` bounds each operation (opening a
// link included), each receive has a `maxWaitTimeInMs`, loops run against a deadline, and each
// test has a timeout. Retries are off (`maxRetries: 0`): a local broker has no transient faults,
// so a retry would only hide one.
//
// On a failure the test's stderr shows the broker's log and the SDK's recent log with rhea's
// frame trace. `@azure/logger` and `debug` are the SDK's own dependencies (hoisted to the top of
// node_modules by the pinned lock file), so they are the instances the SDK logs through.

const assert = require("node:assert/strict");
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { monitorEventLoopDelay } = require("node:perf_hooks");
const { test } = require("node:test");
const util = require("node:util");

const debug = require("debug");
const { AzureLogger, setLogLevel } = require("@azure/logger");
const { ServiceBusClient } = require("@azure/service-bus");

const { Broker } = require("./broker");

// Bound on collecting the messages a test expects, over several receive calls.
const DEADLINE_MS = 30_000;
// `maxWaitTimeInMs` of one receive call.
const RECEIVE_WAIT_MS = 5_000;
// The client's `retryOptions.timeoutInMs`: each operation (send, peek, renew, settle, link).
const OPERATION_TIMEOUT_MS = 20_000;
// A whole test, broker start and stop included.
const TEST_TIMEOUT_MS = 120_000;
// The slack allowed between a time the broker reports and the local clock.
const CLOCK_SLACK_MS = 1_000;
// How far past an instant (a lock's or a message's expiry) a test waits before it counts it as
// passed.
const EXPIRY_MARGIN_MS = 250;
// Pause between two polls of a condition.
const POLL_MS = 50;
// SDK log lines kept for a failure report.
const TRACE_LINES = 400;

// --- the SDK's log, kept for failures --------------------------------------------------------

// Each line is prefixed with the milliseconds since its test began.
const trace = [];
let traceStarted = Date.now();
function record(...args) {
  trace.push(`+${Date.now() - traceStarted}ms ${util.format(...args)}`);
  if (trace.length > TRACE_LINES) trace.shift();
}
setLogLevel("info");
AzureLogger.log = record;
debug.log = record;
debug.enable("rhea:frames");

// --- a broker and a client per test ----------------------------------------------------------

/** A `ServiceBusClient` on `broker` in emulator mode: plain TCP to its port, no retries. */
function openClient(broker) {
  return new ServiceBusClient(broker.connectionString, {
    retryOptions: { maxRetries: 0, timeoutInMs: OPERATION_TIMEOUT_MS },
  });
}

/**
 * A node:test test that runs `body({ broker, client })` against a fresh broker started with
 * `options.settings` and `options.queues` (see Broker.start), stopped with SIGTERM afterwards
 * (a broker that does not stop cleanly fails the test). On a failure the broker's log and the
 * SDK's log are written to stderr.
 */
function brokerTest(name, options, body) {
  if (typeof options === "function") [options, body] = [{}, options];
  test(name, { timeout: options.timeout ?? TEST_TIMEOUT_MS }, async () => {
    trace.length = 0;
    traceStarted = Date.now();
    // A failure report says how long this process stalled at worst: a stall past an operation's
    // timeout fails it whatever the broker does (timers run before the I/O that was due).
    const stalls = monitorEventLoopDelay({ resolution: 20 });
    stalls.enable();
    const broker = await Broker.start(options);
    const client = openClient(broker);
    let failure = null;
    try {
      await body({ broker, client });
    } catch (error) {
      failure = error;
    }
    try {
      await client.close();
    } catch (error) {
      failure ??= error;
    }
    try {
      await broker.stop();
    } catch (error) {
      failure ??= error;
    }
    stalls.disable();
    if (failure !== null) {
      process.stderr.write(
        `\n=== ${name}: longest event-loop stall of the test process: ` +
          `${Math.round(stalls.max / 1e6)} ms ===` +
          `\n=== ${name}: tidebus log ${broker.logPath} ===\n${broker.readLog()}` +
          `\n=== ${name}: SDK log (last ${TRACE_LINES} lines) ===\n${trace.join("\n")}\n`,
      );
      throw failure;
    }
    broker.remove();
  });
}

// --- messages --------------------------------------------------------------------------------

/** Message `<tag>-<index>`; `fields` sets more ServiceBusMessage fields (timeToLive, ...). */
function numbered(tag, index, fields = {}) {
  return {
    body: `${tag} body ${index}`,
    messageId: `${tag}-${index}`,
    applicationProperties: { index, tag },
    ...fields,
  };
}

/** What a test compares: message id, body, application properties. */
function summary(message) {
  return [message.messageId, message.body, { ...message.applicationProperties }];
}

function expectedSummary(tag, index) {
  return [`${tag}-${index}`, `${tag} body ${index}`, { index, tag }];
}

function ids(messages) {
  return messages.map((message) => message.messageId);
}

/** A sequence number (a `Long`) as a JavaScript number, exact for any the tests see. */
function seq(message) {
  return message.sequenceNumber.toNumber();
}

// --- client steps ----------------------------------------------------------------------------

/** Send a message, a list or a batch to `queue` with a fresh sender. */
async function send(client, queue, messages) {
  const sender = client.createSender(queue);
  try {
    await sender.sendMessages(messages);
  } finally {
    await sender.close();
  }
}

/** Receive until `count` messages arrived; fails if that takes longer than `deadlineMs`. */
async function receiveExactly(receiver, count, deadlineMs = DEADLINE_MS) {
  const received = [];
  const deadline = Date.now() + deadlineMs;
  while (received.length < count && Date.now() < deadline) {
    const batch = await receiver.receiveMessages(count - received.length, {
      maxWaitTimeInMs: RECEIVE_WAIT_MS,
    });
    received.push(...batch);
  }
  assert.equal(
    received.length,
    count,
    `expected ${count} messages within ${deadlineMs} ms, got ${received.length}: ${ids(received)}`,
  );
  return received;
}

async function receiveOne(receiver) {
  return (await receiveExactly(receiver, 1))[0];
}

/**
 * Runs `body(receiver)` with a new receiver on `queue`, closed afterwards. If `body` fails, an
 * error of the close does not hide its error.
 */
async function withReceiver(client, queue, options, body) {
  if (typeof options === "function") [options, body] = [{}, options];
  const receiver = client.createReceiver(queue, options);
  let result;
  try {
    result = await body(receiver);
  } catch (error) {
    await receiver.close().catch(() => {});
    throw error;
  }
  await receiver.close();
  return result;
}

/**
 * Runs `body(receiver)` with the receiver `open` gives (a receiver, or a promise of one, such
 * as a session receiver `acceptSession` opens), closed afterwards.
 */
async function withOpened(open, body) {
  const receiver = await open;
  try {
    return await body(receiver);
  } finally {
    await receiver.close().catch(() => {});
  }
}

/**
 * Send a marker; a fresh receiver's first message must be just the marker. FIFO makes anything
 * still available in the queue arrive before it, so this shows the queue held nothing else,
 * without waiting for a receive to time out.
 */
async function assertOnlyMarkerLeft(client, queue, receiveMode = "peekLock") {
  await send(client, queue, { body: "marker", messageId: "marker" });
  await withReceiver(client, queue, { receiveMode }, async (receiver) => {
    const first = await receiveOne(receiver);
    assert.equal(
      first.messageId,
      "marker",
      `${queue} still held ${first.messageId} (${first.body}) before the marker`,
    );
    if (receiveMode === "peekLock") await receiver.completeMessage(first);
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Poll the clock until it is EXPIRY_MARGIN_MS past `instant` (a Date: a lock or TTL expiry). */
async function waitUntilPast(instant, deadlineMs = DEADLINE_MS) {
  const target = instant.getTime() + EXPIRY_MARGIN_MS;
  const deadline = Date.now() + deadlineMs;
  while (Date.now() <= target) {
    assert.ok(Date.now() < deadline, `${instant.toISOString()} not passed within ${deadlineMs} ms`);
    await sleep(POLL_MS);
  }
}

/** Resolves to the error `promise` rejects with; fails if it fulfils. */
async function rejection(promise, what) {
  try {
    const value = await promise;
    assert.fail(`${what} succeeded: ${util.inspect(value, { depth: 1 })}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    return error;
  }
}

/** `tidebus gen-cert` for localhost into a new temporary directory; the paths of its three files. */
function generateCertificates() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tidebus-js-certs-"));
  execFileSync(process.env.TIDEBUS_BIN, ["gen-cert", "--host", "localhost", "--out", dir]);
  return {
    ca: path.join(dir, "ca.pem"),
    cert: path.join(dir, "server.pem"),
    key: path.join(dir, "server-key.pem"),
  };
}

module.exports = {
  CLOCK_SLACK_MS,
  generateCertificates,
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
  waitUntilPast,
  withOpened,
  withReceiver,
};
