"use strict";
// The web console in a real browser: Debian's Chromium (TIDEBUS_CHROMIUM, installed by
// tests/broker/js.rs) driven headless by playwright-core, against the real broker, with the
// official @azure/service-bus SDK sending and receiving beside it. Screenshots are saved under
// TIDEBUS_SCREENSHOTS.

const assert = require("node:assert/strict");
const path = require("node:path");

const { chromium } = require("playwright-core");

const { brokerTest, receiveOne, send } = require("./common");

// Bound on one browser step (a click's effect, a table refresh).
const STEP_MS = 15_000;

const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** A browser page on the broker's console; `body(page)` runs with it, then it closes. */
async function withConsole(broker, body) {
  const executablePath = process.env.TIDEBUS_CHROMIUM;
  assert.ok(executablePath, "TIDEBUS_CHROMIUM names the browser (run through cargo test)");
  const browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    page.setDefaultTimeout(STEP_MS);
    page.on("dialog", (dialog) => dialog.accept());
    await page.goto(`http://127.0.0.1:${broker.adminPort}/`);
    await body(page);
  } finally {
    await browser.close();
  }
}

function screenshot(page, name) {
  const dir = process.env.TIDEBUS_SCREENSHOTS;
  return dir ? page.screenshot({ path: path.join(dir, name), fullPage: true }) : null;
}

/** The entities table's row of `entity` (a path), once it shows. */
function entityRow(page, entity) {
  return page.locator(`[data-testid=entity-row][data-path="${entity}"]`);
}

/** The text of one count column of an entity's row (3: active ... 6: dead-letter). */
function countOf(page, entity, column) {
  return entityRow(page, entity).locator(`td:nth-child(${column})`);
}

const ACTIVE = 3;
const DEAD_LETTER = 6;

brokerTest(
  "the console lists, peeks, resubmits, purges and sends",
  { topics: [{ name: "events", subscriptions: ["all"] }] },
  async ({ broker, client }) => {
    // The SDK writes a body as JSON in a data section.
    await send(client, "q1", {
      body: { order: 42 },
      messageId: "peek-me",
      subject: "orders",
      applicationProperties: { colour: "red" },
    });
    await send(client, "q2", [
      { body: "poison", messageId: "dead-1" },
      { body: "also poison", messageId: "dead-2" },
    ]);
    const receiver = client.createReceiver("q2");
    for (let n = 0; n < 2; n++) {
      const message = await receiveOne(receiver);
      await receiver.deadLetterMessage(message, {
        deadLetterReason: "BadOrder",
        deadLetterErrorDescription: "no such product",
      });
    }

    await withConsole(broker, async (page) => {
      // The entities with their counts, the topic's subscription included.
      await entityRow(page, "events/Subscriptions/all").waitFor();
      await assertText(countOf(page, "q1", ACTIVE), "1");
      await assertText(countOf(page, "q2", DEAD_LETTER), "2");

      // Peek: the message's properties and its body as text and as JSON.
      await entityRow(page, "q1").click();
      await page.locator("[data-testid=message-row]").first().click();
      const application = page.locator("[data-testid=message-application]");
      assert.match(await application.textContent(), /"colour": "red"/);
      assert.match(await page.locator("[data-testid=message-system]").textContent(), /"subject": "orders"/);
      await assertText(page.locator("[data-testid=message-body]"), '{"order":42}');
      await page.locator("[data-testid=body-format]").selectOption("json");
      await assertText(page.locator("[data-testid=message-body]"), '{\n  "order": 42\n}');
      await screenshot(page, "console.png");

      // Dead letters: the reason at a glance, then one resubmitted.
      await entityRow(page, "q2").click();
      await page.locator("[data-testid=tab-deadletter]").click();
      await assertText(page.locator("[data-testid=reason]"), "BadOrder: 2");
      await page.locator("[data-testid=message-row]").first().click();
      await screenshot(page, "console-dead-letters.png");
      await page.locator("[data-testid=resubmit]").click();
      await assertText(countOf(page, "q2", DEAD_LETTER), "1");
      await assertText(countOf(page, "q2", ACTIVE), "1");
      const back = await receiveOne(receiver);
      assert.equal(back.messageId, "dead-1");
      assert.equal(back.deliveryCount, 0, "resubmitted as a new arrival");
      assert.equal(back.deadLetterReason, undefined, "its dead-letter reason is gone");
      await receiver.completeMessage(back);

      // Purge the other dead letter.
      await page.locator("[data-testid=purge]").click();
      await assertText(countOf(page, "q2", DEAD_LETTER), "0");
      const dead = client.createReceiver("q2", { subQueueType: "deadLetter" });
      assert.deepEqual(await dead.peekMessages(10), [], "the dead-letter queue is empty");
      await dead.close();

      // A test message from the form reaches the SDK.
      await page.locator("[data-testid=send-entity]").fill("q2");
      await page.locator("[data-testid=send-message-id]").fill("from-console");
      await page.locator("[data-testid=send-properties]").fill('{"source":"console"}');
      await page.locator("[data-testid=send-body]").fill("hello from the console");
      await page.locator("[data-testid=send]").click();
      const sent = await receiveOne(receiver);
      assert.equal(sent.messageId, "from-console");
      assert.equal(sent.applicationProperties.source, "console");
      assert.equal(Buffer.from(sent.body).toString(), "hello from the console");
      await receiver.completeMessage(sent);
    });
    await receiver.close();
  },
);

brokerTest(
  "without anonymous access the console asks for a key, then works",
  { settings: { allow_anonymous: false } },
  async ({ broker, client }) => {
    await send(client, "q1", { body: "secret", messageId: "behind-a-key" });
    await withConsole(broker, async (page) => {
      await page.locator("[data-testid=auth]").waitFor();
      await page.locator("[data-testid=auth-key]").fill("not the key");
      await page.locator("[data-testid=sign-in]").click();
      await page.locator("[data-testid=auth]").waitFor();
      assert.match(await page.locator("[data-testid=status]").textContent(), /does not verify/);
      await page.locator("[data-testid=auth-key]").fill("SAS_KEY_VALUE");
      await page.locator("[data-testid=sign-in]").click();
      await assertText(countOf(page, "q1", ACTIVE), "1");
    });
  },
);

/** Waits until `locator`'s text is `expected` (the console refreshes on its own). */
async function assertText(locator, expected) {
  const deadline = Date.now() + STEP_MS;
  let last;
  while (Date.now() < deadline) {
    last = await locator.first().textContent().catch(() => null);
    if (last !== null && last.trim() === expected) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail(`expected ${JSON.stringify(expected)}, last saw ${JSON.stringify(last)}`);
}
