// The page's wiring (main.js) in a fake page: the four view elements, a stub Plotly, a fake
// websocket that the test speaks through, timers that never fire. What it remembers per view
// (the request ids debug() reports) stays bounded however many requests the views drew.
import assert from "node:assert/strict";
import { test } from "node:test";

import { loadTrace, META, STRINGS } from "./fixtures.js";

const VIEW_IDS = ["bs-token-layout", "bs-block-tables", "bs-attention", "bs-timing"];
const SEEN_LIMIT = 256;  // main.js's
const sockets = [];

class FakeSocket {
  constructor() { sockets.push(this); }

  close() {}

  send(message) { this.onmessage({ data: JSON.stringify(message) }); }
}

function fakePage() {
  const elements = Object.fromEntries(VIEW_IDS.map((id) => [id, { id, clientWidth: 640, clientHeight: 340, dataset: {} }]));
  const ignore = () => {};
  globalThis.window = { localStorage: null, location: { href: "http://127.0.0.1:7860/" }, addEventListener: ignore,
    requestAnimationFrame: (draw) => draw(), setTimeout: () => 0, clearTimeout: ignore,
    WebSocket: FakeSocket, EventSource: undefined, Plotly: { react: ignore } };
  globalThis.document = { body: { classList: { add: ignore, remove: ignore, toggle: ignore }, hasAttribute: () => false },
    documentElement: {},
    addEventListener: ignore, dispatchEvent: ignore, querySelector: () => null,
    getElementById: (id) => elements[id] || null, createTreeWalker: () => ({ nextNode: () => null }) };
  globalThis.MutationObserver = class { observe() {} disconnect() {} };
  globalThis.fetch = async () => ({ ok: true, json: async () => STRINGS });
}

// The shipped trace's first decode-only record, again and again, its requests renamed each step.
function renamedRecords(count) {
  const record = loadTrace().records.find((r) => r.segments.length > 3 && r.segments.every((s) => s.num_rows === 1));
  const rids = Object.keys(record.requests);
  return Array.from({ length: count }, (_, step) => {
    let text = JSON.stringify({ ...record, step });
    for (const rid of rids) text = text.replaceAll(`"${rid}"`, `"${rid}.${step}"`);
    return JSON.parse(text);
  });
}

test("the ids the page remembers per view stay bounded (the last ones drawn)", async () => {
  fakePage();
  await import("../../assets/js/main.js");
  for (let turn = 0; !sockets.length && turn < 10000; turn++) await new Promise(setImmediate);
  assert.equal(sockets.length, 1, "the page opens its link once its strings are in");
  const socket = sockets[0];
  socket.send({ type: "snapshot", viewer: "v1", meta: META, requests: [], records: [],
    status: { source: "live", state: "ready" } });
  const records = renamedRecords(120);
  for (const record of records) socket.send({ type: "frame", events: [], records: [record] });
  const seen = window.batchscope.debug().seen;
  const last = records[records.length - 1].segments.map((s) => s.request_id);
  assert.ok(records.length * last.length > SEEN_LIMIT);
  for (const key of ["layout", "blocks", "attention", "timing"]) {
    assert.equal(seen[key].length, SEEN_LIMIT, key);
    assert.deepEqual(seen[key].filter((rid) => last.includes(rid)).sort(), [...last].sort(), key);
  }
});
