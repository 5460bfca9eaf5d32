"use strict";
// The real broker binary ($TIDEBUS_BIN) as a child process on a free loopback port, with a
// config written to a temporary directory (the JavaScript twin of tests/python/tidebus_broker.py).

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const START_DEADLINE_MS = 30_000;
const STOP_DEADLINE_MS = 20_000;
const POLL_MS = 50;

// What every test broker runs with unless a test asks otherwise: anonymous clients let in, and
// the emulator's policy, whose key signs the tokens the SDK puts (the broker verifies them).
const DEFAULT_SETTINGS = { durability: "memory", idle_timeout: "60s", allow_anonymous: true };
const DEFAULT_QUEUES = ["q1", "q2"];
const EMULATOR_POLICY = {
  name: "RootManageSharedAccessKey",
  key: "SAS_KEY_VALUE",
  rights: ["Manage", "Send", "Listen"],
};

// Brokers still running: killed if the test process exits without stopping them.
const running = new Set();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** A str, integer or bool as a TOML value (all the config needs). */
function tomlValue(value) {
  if (typeof value === "boolean") return value ? "true" : "false";
  if (Number.isInteger(value)) return String(value);
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(tomlValue).join(", ")}]`;
  throw new TypeError(`no TOML encoding for ${value} (${typeof value})`);
}

/**
 * The config file text: `[broker]` settings (a `tls` object becomes `[broker.tls]`, a `testing`
 * object `[testing]`), one
 * `[[shared_access_policies]]` table per policy, one `[[queues]]` table per queue, then one
 * `[[topics]]` table per topic. A policy is an object with `name`, `key` and `rights`; a queue
 * is a name, or an object with `name` and any other `[[queues]]` keys; a topic is an object with
 * `name` and `subscriptions`, each a name or an object with `name` and any other
 * `[[topics.subscriptions]]` keys.
 */
function renderConfig({ tls, testing, ...settings }, queues, topics, policies) {
  const lines = ["[broker]"];
  const table = (header, entries) => {
    lines.push("", header);
    for (const [key, value] of Object.entries(entries)) lines.push(`${key} = ${tomlValue(value)}`);
  };
  for (const [key, value] of Object.entries(settings)) lines.push(`${key} = ${tomlValue(value)}`);
  if (tls) table("[broker.tls]", tls);
  if (testing) table("[testing]", testing);
  for (const policy of policies) table("[[shared_access_policies]]", policy);
  for (const queue of queues) table("[[queues]]", typeof queue === "string" ? { name: queue } : queue);
  for (const { subscriptions = [], ...topic } of topics) {
    table("[[topics]]", topic);
    for (const subscription of subscriptions) {
      const entries = typeof subscription === "string" ? { name: subscription } : subscription;
      table("[[topics.subscriptions]]", entries);
    }
  }
  return lines.join("\n") + "\n";
}

function brokerBinary() {
  const bin = process.env.TIDEBUS_BIN;
  if (!bin) {
    throw new Error(
      "TIDEBUS_BIN is not set: run the suite through `cargo test`, or set it to a built broker, " +
        "e.g. TIDEBUS_BIN=target/debug/tidebus",
    );
  }
  fs.accessSync(bin, fs.constants.X_OK);
  return bin;
}

/**
 * `{ host, port, tlsPort, websocketAddresses, adminPort }` once the ready file holds `host:port`
 * on its first line (then `tls host:port` when TLS is on, `websocket host:port` for each
 * listener of `websocket_listen`, listed as `{ host, port }`, and `admin host:port` for the
 * administration endpoint; a port is null when its line is absent), else null.
 */
function parseReadyFile(file) {
  let lines;
  try {
    lines = fs.readFileSync(file, "utf8").split("\n");
  } catch {
    return null;
  }
  const address = (text) => /^\[?(.+?)\]?:(\d+)$/.exec(text);
  const plain = address(lines[0]);
  if (!plain) return null;
  const addressesOf = (prefix) => lines.slice(1)
    .map((line) => line.startsWith(prefix) && address(line.slice(prefix.length)))
    .filter(Boolean)
    .map((found) => ({ host: found[1], port: Number(found[2]) }));
  const portOf = (prefix) => addressesOf(prefix)[0]?.port ?? null;
  return {
    host: plain[1],
    port: Number(plain[2]),
    tlsPort: portOf("tls "),
    websocketAddresses: addressesOf("websocket "),
    adminPort: portOf("admin "),
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One running broker; `host` and `port` say where it listens. */
class Broker {
  /**
   * Starts a broker with `settings` merged over DEFAULT_SETTINGS, `queues` (default
   * DEFAULT_QUEUES), `topics` (default none) and `policies` (default the emulator's) in a new
   * temporary directory; resolves once it accepts connections.
   */
  static async start({
    settings = {},
    queues = DEFAULT_QUEUES,
    topics = [],
    policies = [EMULATOR_POLICY],
  } = {}) {
    const broker = new Broker(fs.mkdtempSync(path.join(os.tmpdir(), "tidebus-js-")));
    const config = renderConfig({ ...DEFAULT_SETTINGS, ...settings }, queues, topics, policies);
    fs.writeFileSync(broker.configPath, config);
    await broker.#spawn();
    return broker;
  }

  constructor(workdir) {
    this.workdir = workdir;
    this.configPath = path.join(workdir, "tidebus.toml");
    this.readyPath = path.join(workdir, "ready");
    this.dataDir = path.join(workdir, "data");
    this.logPath = path.join(workdir, "broker.log");
    this.child = null;
    this.exit = null;
    this.host = null;
    this.port = null;
    this.tlsPort = null;
    this.websocketAddresses = [];
    this.adminPort = null;
  }

  async #spawn() {
    const args = [
      "--config", this.configPath,
      "--listen", "127.0.0.1:0",
      "--admin-listen", "127.0.0.1:0",
      "--data-dir", this.dataDir,
      "--ready-file", this.readyPath,
    ];
    const log = fs.openSync(this.logPath, "a");
    const env = { RUST_LOG: "info,tidebus=debug", RUST_BACKTRACE: "1", ...process.env };
    this.child = spawn(brokerBinary(), args, { stdio: ["ignore", log, log], env });
    fs.closeSync(log);
    running.add(this.child);
    this.exit = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => {
        running.delete(this.child);
        resolve({ code, signal });
      });
    });
    const deadline = Date.now() + START_DEADLINE_MS;
    for (;;) {
      if (this.child.exitCode !== null || this.child.signalCode !== null) {
        throw new Error(`broker exited (${this.child.exitCode ?? this.child.signalCode}) ` +
          `before writing ${this.readyPath}\n${this.readLog()}`);
      }
      const address = parseReadyFile(this.readyPath);
      if (address) {
        Object.assign(this, address);
        return;
      }
      if (Date.now() > deadline) {
        this.child.kill("SIGKILL");
        throw new Error(`broker did not write ${this.readyPath} within ${START_DEADLINE_MS} ms`);
      }
      await sleep(POLL_MS);
    }
  }

  /** The connection string of Microsoft's emulator, on this broker's port. */
  get connectionString() {
    return (
      `Endpoint=sb://${this.host}:${this.port};` +
      "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;" +
      "UseDevelopmentEmulator=true;"
    );
  }

  readLog() {
    try {
      return fs.readFileSync(this.logPath, "utf8");
    } catch {
      return "(no broker log)";
    }
  }

  /** SIGTERM, then wait for a graceful exit with code 0; rejects otherwise. */
  async stop() {
    if (this.child === null) return;
    const child = this.child;
    this.child = null;
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`broker exited on its own (${child.exitCode ?? child.signalCode}) ` +
        "before teardown");
    }
    child.kill("SIGTERM");
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), STOP_DEADLINE_MS);
    });
    const exit = await Promise.race([this.exit, timeout]);
    clearTimeout(timer);
    if (exit === null) {
      child.kill("SIGKILL");
      throw new Error(`broker did not exit within ${STOP_DEADLINE_MS} ms of SIGTERM; killed it`);
    }
    if (exit.code !== 0) {
      throw new Error(`broker exited with ${exit.code ?? exit.signal} after SIGTERM, expected 0`);
    }
  }

  /** Deletes the working directory (config, data, log). */
  remove() {
    fs.rmSync(this.workdir, { recursive: true, force: true });
  }
}

module.exports = { Broker, renderConfig };
