// The telemetry link's state machine with fake sockets, event sources and timers.
import assert from "node:assert/strict";
import { test } from "node:test";

import { openTelemetry, SILENCE_MS } from "../../assets/js/transport.js";

function environment() {
  const env = { now: 0, timers: [], sockets: [], streams: [] };
  env.setTimeout = (fn, ms) => { const timer = { at: env.now + ms, fn }; env.timers.push(timer); return timer; };
  env.clearTimeout = (timer) => { env.timers = env.timers.filter((x) => x !== timer); };
  env.advance = (ms) => {
    const end = env.now + ms;
    for (;;) {
      const due = env.timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      env.timers = env.timers.filter((x) => x !== due);
      env.now = due.at;
      due.fn();
    }
    env.now = end;
  };
  env.WebSocket = class { constructor(url) { this.url = url; this.closed = false; env.sockets.push(this); } close() { this.closed = true; } };
  env.EventSource = class { constructor(url) { this.url = url; this.closed = false; env.streams.push(this); } close() { this.closed = true; } };
  return env;
}

function start(env) {
  const got = [], links = [];
  const link = openTelemetry({ base: "https://space.example/app/?x=1", onMessage: (m) => got.push(m),
    onLink: (k) => links.push(k), env });
  return { link, got, links };
}

const send = (target, message) => target.onmessage({ data: JSON.stringify(message) });

test("the websocket comes first, on the page's host, wss under https", () => {
  const env = environment();
  const { got, links } = start(env);
  assert.equal(env.sockets[0].url, "wss://space.example/ws/telemetry");
  send(env.sockets[0], { type: "snapshot" });
  send(env.sockets[0], { type: "ping" });
  assert.deepEqual(got, [{ type: "snapshot" }]);
  assert.deepEqual(links, ["ws"]);
});

test("a websocket refused before its first message falls back to SSE for good", () => {
  const env = environment();
  const { link, got, links } = start(env);
  env.sockets[0].onclose();
  assert.equal(link.kind, "sse");
  env.advance(300);
  assert.equal(env.streams[0].url, "https://space.example/telemetry/stream");
  send(env.streams[0], { type: "snapshot" });
  assert.deepEqual(got, [{ type: "snapshot" }]);
  assert.deepEqual(links, ["reconnecting", "sse"]);
  env.streams[0].onerror();
  env.advance(5000);
  assert.equal(env.sockets.length, 1);
  assert.equal(env.streams.length, 2);
});

test("a websocket that worked and then closed is reopened, with growing backoff", () => {
  const env = environment();
  const { link } = start(env);
  send(env.sockets[0], { type: "snapshot" });
  env.sockets[0].onclose();
  assert.equal(link.kind, "ws");
  env.advance(299);
  assert.equal(env.sockets.length, 1);
  env.advance(1);
  assert.equal(env.sockets.length, 2);
  send(env.sockets[1], { type: "snapshot" });
  env.sockets[1].onclose();  // heard: still a websocket, backoff restarts at 0.3 s
  env.advance(300);
  env.sockets[2].onmessage({ data: "{}" });
  env.sockets[2].onerror();
  env.advance(300);
  assert.equal(env.sockets.length, 4);
});

test("six seconds of silence close the link and open a new one", () => {
  const env = environment();
  start(env);
  send(env.sockets[0], { type: "snapshot" });
  env.advance(SILENCE_MS - 1);
  send(env.sockets[0], { type: "frame" });
  env.advance(SILENCE_MS - 1);
  assert.equal(env.sockets[0].closed, false);
  env.advance(1);
  assert.equal(env.sockets[0].closed, true);
  env.advance(300);
  assert.equal(env.sockets.length, 2);
});

test("backoff doubles up to five seconds while nothing answers", () => {
  const env = environment();
  start(env);
  env.sockets[0].onclose();  // falls back to SSE
  const opened = [];
  for (let i = 0; i < 7; i++) {
    const before = env.streams.length, t0 = env.now;
    while (env.streams.length === before) env.advance(50);
    opened.push(env.now - t0);
    env.streams[env.streams.length - 1].onerror();
  }
  assert.deepEqual(opened, [300, 600, 1200, 2400, 4800, 5000, 5000]);
});

test("close() stops everything", () => {
  const env = environment();
  const { link } = start(env);
  link.close();
  assert.equal(env.sockets[0].closed, true);
  assert.equal(env.timers.length, 0);
});

test("with DecompressionStream the page asks for deflate-raw and reads binary messages in order", async () => {
  const { deflateRawSync } = await import("node:zlib");
  const env = { ...environment(), DecompressionStream: globalThis.DecompressionStream };
  const { got, links } = start(env);
  const ws = env.sockets[0];
  assert.equal(ws.url, "wss://space.example/ws/telemetry?compress=deflate-raw");
  assert.equal(ws.binaryType, "arraybuffer");
  const big = { type: "snapshot", records: Array.from({ length: 2000 }, (_, step) => ({ step })) };
  const bytes = (message) => new Uint8Array(deflateRawSync(JSON.stringify(message))).buffer;
  ws.onmessage({ data: bytes(big) });  // a big one first: inflated later than the small one would be
  ws.onmessage({ data: bytes({ type: "frame", seq: 1 }) });
  ws.onmessage({ data: new Uint8Array([1, 2, 3]).buffer });  // not DEFLATE: dropped like bad JSON
  ws.onmessage({ data: JSON.stringify({ type: "frame", seq: 2 }) });  // a text message still reads
  await until(() => got.length === 3);
  assert.deepEqual(got.map((m) => m.seq ?? m.records.length), [2000, 1, 2]);
  assert.deepEqual(links, ["ws"]);
});

test("a message compressed in two parts (a snapshot's own head, then a tail shared by many) inflates as one", async () => {
  const { deflateRawSync, constants } = await import("node:zlib");
  const env = { ...environment(), DecompressionStream: globalThis.DecompressionStream };
  const { got } = start(env);
  const head = '{"type": "snapshot", "viewer": "v7", ';
  const tail = `"records": ${JSON.stringify(Array.from({ length: 500 }, (_, step) => ({ step })))}}`;
  const parts = [deflateRawSync(head, { finishFlush: constants.Z_SYNC_FLUSH }), deflateRawSync(tail)];
  env.sockets[0].onmessage({ data: new Uint8Array(Buffer.concat(parts)).buffer });
  await until(() => got.length === 1);
  assert.equal(got[0].viewer, "v7");
  assert.equal(got[0].records.length, 500);
});

async function until(done, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  while (!done() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
}
