// The Tidebus web console: plain JavaScript against the JSON calls under /$console/api/.
"use strict";

const $ = (selector) => document.querySelector(selector);
const TOKEN_KEY = "tidebus-console-token";
const state = { entity: null, tab: "active", from: 0, next: null, selected: null, refreshing: null };

function status(text) {
  $("#status").textContent = text;
}

// A SharedAccessSignature for this host, as the SDKs compute it: HMAC-SHA256 over the
// URL-encoded resource and the expiry, with the key's UTF-8 bytes.
async function sign(name, key) {
  const resource = encodeURIComponent(`${location.protocol}//${location.host}/`.toLowerCase());
  const expiry = Math.floor(Date.now() / 1000) + 3600;
  const encoder = new TextEncoder();
  const hmac = await crypto.subtle.importKey(
    "raw", encoder.encode(key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const signature = await crypto.subtle.sign("HMAC", hmac, encoder.encode(`${resource}\n${expiry}`));
  const base64 = btoa(String.fromCharCode(...new Uint8Array(signature)));
  return `SharedAccessSignature sr=${resource}&sig=${encodeURIComponent(base64)}&se=${expiry}&skn=${name}`;
}

class Unauthorized extends Error {}

async function call(path, body) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = token;
  const init = { headers };
  if (body !== undefined) {
    init.method = "POST";
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(`/$console/api/${path}`, init);
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  if (response.status === 401) throw new Unauthorized(answer.error);
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

function askToSignIn(reason) {
  $("#auth").hidden = false;
  $("#main").hidden = true;
  status(reason || "sign in");
}

async function guarded(work) {
  try {
    await work();
  } catch (error) {
    if (error instanceof Unauthorized) askToSignIn(error.message);
    else status(`error: ${error.message}`);
  }
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function size(bytes) {
  if (bytes === undefined) return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

async function loadEntities() {
  const { entities } = await call("entities");
  const body = $("#entities tbody");
  body.replaceChildren();
  for (const entity of entities) {
    const row = body.insertRow();
    row.dataset.testid = "entity-row";
    row.dataset.path = entity.path;
    if (entity.path === state.entity) row.classList.add("selected");
    const c = entity.counts;
    cell(row, entity.path);
    cell(row, entity.kind);
    cell(row, c.active ?? "", "n");
    cell(row, c.scheduled ?? "", "n");
    cell(row, c.deferred ?? "", "n");
    cell(row, c.deadLetter ?? "", c.deadLetter ? "n dead" : "n");
    cell(row, size(c.bytes), "n");
    if (entity.kind !== "topic") row.onclick = () => guarded(() => openEntity(entity.path));
  }
  status(`${entities.length} entities · ${new Date().toLocaleTimeString()}`);
}

async function openEntity(path) {
  state.entity = path;
  state.from = 0;
  $("#detail").hidden = false;
  $("#detail-title").textContent = path;
  const sendTo = path.split("/")[0];
  document.querySelector("#send-form [name=entity]").value = sendTo;
  await loadMessages();
}

async function loadMessages() {
  for (const button of document.querySelectorAll("#tabs button")) {
    button.classList.toggle("on", button.dataset.state === state.tab);
  }
  const dead = state.tab === "deadletter";
  $("#dead-tools").hidden = !dead;
  $("#message").hidden = true;
  const query = new URLSearchParams({ entity: state.entity, state: state.tab, from: state.from, top: 20 });
  const { messages, next } = await call(`messages?${query}`);
  state.next = next;
  $("#next-page").hidden = next === null || next === undefined;
  const body = $("#messages tbody");
  body.replaceChildren();
  for (const message of messages) {
    const a = message.annotations || {};
    const p = message.properties || {};
    const app = message.applicationProperties || {};
    const row = body.insertRow();
    row.dataset.testid = "message-row";
    row.dataset.seq = a["x-opt-sequence-number"];
    cell(row, a["x-opt-sequence-number"], "n");
    cell(row, p.messageId ?? "");
    cell(row, a["x-opt-enqueued-time"] ? new Date(a["x-opt-enqueued-time"]).toLocaleString() : "");
    cell(row, p.subject ?? "");
    cell(row, (message.header && message.header.deliveryCount) || 0, "n");
    cell(row, app.DeadLetterReason ?? "", "dead");
    row.onclick = () => showMessage(message, row);
  }
  if (dead) await loadReasons();
}

async function loadReasons() {
  const { reasons, counted, capped } = await call(`reasons?${new URLSearchParams({ entity: state.entity })}`);
  const box = $("#reasons");
  box.replaceChildren();
  for (const [reason, count] of Object.entries(reasons)) {
    const tag = document.createElement("span");
    tag.dataset.testid = "reason";
    tag.textContent = `${reason}: ${count}`;
    box.append(tag);
  }
  if (counted === 0) box.textContent = "No dead letters.";
  if (capped) box.append(` (the first ${counted} dead letters)`);
}

function bytesOf(message) {
  if (message.bodyKind === "data") {
    return Uint8Array.from(atob(message.body), (c) => c.charCodeAt(0));
  }
  return new TextEncoder().encode(
    typeof message.body === "string" ? message.body : JSON.stringify(message.body));
}

function renderBody() {
  const message = state.selected;
  if (!message) return;
  const bytes = bytesOf(message);
  const format = $("#body-format").value;
  let shown;
  if (format === "hex") {
    shown = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");
  } else {
    const text = new TextDecoder().decode(bytes);
    shown = text;
    if (format === "json") {
      try {
        shown = JSON.stringify(JSON.parse(text), null, 2);
      } catch {
        shown = `(not JSON)\n${text}`;
      }
    }
  }
  if (message.truncated) shown += `\n\n(not shown: ${message.truncated.join("; ")})`;
  $("#message-body").textContent = shown;
}

function showMessage(message, row) {
  for (const other of document.querySelectorAll("#messages tr.selected")) other.classList.remove("selected");
  row.classList.add("selected");
  state.selected = message;
  const a = message.annotations || {};
  $("#message").hidden = false;
  $("#message-title").textContent = `Message #${a["x-opt-sequence-number"]}`;
  $("#message-system").textContent = JSON.stringify(
    { ...message.properties, ...message.header, annotations: a }, null, 2);
  $("#message-application").textContent = JSON.stringify(message.applicationProperties || {}, null, 2);
  $("#resubmit").hidden = state.tab !== "deadletter";
  renderBody();
}

async function resubmit() {
  const seq = state.selected.annotations["x-opt-sequence-number"];
  const { sequenceNumber } = await call("resubmit", { entity: state.entity, sequenceNumber: seq });
  status(`#${seq} resubmitted to ${state.entity} as #${sequenceNumber}`);
  await Promise.all([loadMessages(), loadEntities()]);
}

async function purge() {
  if (!confirm(`Delete every dead letter of ${state.entity}?`)) return;
  const { purged } = await call("purge", { entity: state.entity });
  status(`${purged} dead letters of ${state.entity} deleted`);
  await Promise.all([loadMessages(), loadEntities()]);
}

async function send(event) {
  event.preventDefault();
  const form = new FormData($("#send-form"));
  const message = Object.fromEntries(form.entries());
  try {
    message.applicationProperties = JSON.parse(message.applicationProperties || "{}");
  } catch {
    status("error: the application properties are not a JSON object");
    return;
  }
  await call("send", message);
  status(`sent to ${message.entity}`);
  await loadEntities();
}

async function signIn() {
  let name = $("#auth-name").value.trim();
  let key = $("#auth-key").value;
  const connection = $("#auth-connection").value.trim();
  if (connection) {
    const parts = Object.fromEntries(connection.split(";").filter(Boolean).map((part) => {
      const at = part.indexOf("=");
      return [part.slice(0, at), part.slice(at + 1)];
    }));
    name = parts.SharedAccessKeyName || name;
    key = parts.SharedAccessKey || key;
  }
  sessionStorage.setItem(TOKEN_KEY, await sign(name, key));
  $("#sign-out").hidden = false;
  $("#auth").hidden = true;
  $("#main").hidden = false;
  await guarded(loadEntities);
}

function start() {
  for (const button of document.querySelectorAll("#tabs button")) {
    button.onclick = () => guarded(() => {
      state.tab = button.dataset.state;
      state.from = 0;
      return loadMessages();
    });
  }
  $("#next-page").onclick = () => guarded(() => {
    state.from = state.next;
    return loadMessages();
  });
  $("#body-format").onchange = renderBody;
  $("#resubmit").onclick = () => guarded(resubmit);
  $("#purge").onclick = () => guarded(purge);
  $("#send-form").onsubmit = (event) => guarded(() => send(event));
  $("#sign-in").onclick = () => guarded(signIn);
  $("#sign-out").onclick = () => {
    sessionStorage.removeItem(TOKEN_KEY);
    askToSignIn("signed out");
  };
  guarded(loadEntities);
  state.refreshing = setInterval(() => {
    if ($("#auth").hidden) guarded(loadEntities);
  }, 3000);
}

start();
