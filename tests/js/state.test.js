import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { HISTORY, initialState, MAX_REQUESTS, reduce } from "../../assets/js/state.js";
import { loadTrace, META, traceMessages } from "./fixtures.js";

const fold = (messages, state = initialState()) => messages.reduce(reduce, state);

// A snapshot of a state that survives a reduce() that must not change it.
const frozen = (state) => JSON.stringify({ ...state, requests: [...state.requests],
  dirty: { ...state.dirty, cards: [...state.dirty.cards] } });

test("the whole trace: the last 40 records, each request's full text, every request finished", () => {
  const { entries, records } = loadTrace();
  const state = fold(traceMessages());
  assert.equal(state.records.length, HISTORY);
  assert.deepEqual(state.records.map((r) => r.step), records.slice(-HISTORY).map((r) => r.step));
  const texts = new Map();
  for (const e of entries) {
    if (e.type === "event" && e.data.kind === "delta") texts.set(e.data.request_id, (texts.get(e.data.request_id) || "") + e.data.text);
  }
  assert.ok(texts.size > 5);
  for (const [rid, text] of texts) {
    assert.equal(state.requests.get(rid).text, text, rid);
    assert.equal(state.requests.get(rid).status, "finished", rid);
  }
  assert.equal(state.meta, META);
  assert.equal(state.viewer, "v1");
});

test("reduce never changes the state it is given", () => {
  let state = initialState();
  for (const message of traceMessages(7)) {
    const before = frozen(state);
    const next = reduce(state, message);
    assert.equal(frozen(state), before);
    state = next;
  }
  const before = frozen(state);
  reduce(state, { type: "drawn" });
  reduce(state, { type: "redraw" });
  assert.equal(frozen(state), before);
});

test("a card is pending until its arrival, waiting until a record schedules it", () => {
  const entry = { request_id: "A1", color: 3, arrival: null, finished: false, text: "", mine: true, visible: true };
  let state = reduce(initialState(), { type: "snapshot", viewer: "v", meta: META, status: {}, requests: [entry], records: [] });
  assert.equal(state.requests.get("A1").status, "pending");
  state = reduce(state, { type: "frame", events: [{ kind: "arrival", request_id: "A1", time: 1, prompt: "hi",
    num_prompt_tokens: 2, token_ids: [], color: 3, visible: true, mine: true }], records: [] });
  assert.equal(state.requests.get("A1").status, "waiting");
  assert.equal(state.requests.get("A1").prompt, "hi");
  state = reduce(state, { type: "frame", events: [], records: [record(0, { A1: "prefilling" })] });
  assert.equal(state.requests.get("A1").status, "prefilling");
});

test("a request fired from the dashboard has a pending card from the frame that says so", () => {
  let state = reduce(initialState(), { type: "snapshot", viewer: "v", meta: META, status: {}, requests: [], records: [] });
  state = reduce(state, { type: "frame", events: [{ kind: "fired", request_id: "B2", time: 1, color: 4,
    label: "200-token prompt", visible: true, mine: true }], records: [] });
  const entry = state.requests.get("B2");
  assert.deepEqual([entry.status, entry.label, entry.color, entry.text, entry.arrival], ["pending", "200-token prompt", 4, "", null]);
  assert.ok(state.dirty.cards.has("B2"));
});

function record(step, statuses, computed = 1) {
  const requests = Object.fromEntries(Object.entries(statuses).map(([rid, status]) => [rid,
    { status, num_prompt_tokens: 4, num_computed_tokens: computed, num_output_tokens: 0, prefill_target: 4 }]));
  return { step, segments: [], requests, finished: {} };
}

test("a record marks dirty only the cards whose state it changed", () => {
  let state = fold([{ type: "snapshot", meta: META, requests: [], records: [] },
    { type: "frame", events: [], records: [record(0, { A: "decoding", B: "decoding", C: "waiting" })] }]);
  state = reduce(state, { type: "drawn" });
  assert.equal(state.dirty.cards.size, 0);
  state = reduce(state, { type: "frame", events: [], records: [record(1, { A: "decoding", B: "decoding", C: "prefilling" })] });
  assert.deepEqual([...state.dirty.cards], ["C"]);
  assert.equal(state.dirty.views, true);
  state = reduce(reduce(state, { type: "drawn" }), { type: "frame", events: [], records: [] });
  assert.equal(state.dirty.views, false);
});

test("requests stay bounded: finished ones are evicted first, oldest first", () => {
  let state = reduce(initialState(), { type: "snapshot", meta: META, requests: [], records: [] });
  const statuses = {};
  for (let i = 0; i < MAX_REQUESTS + 50; i++) statuses[`r${i}`] = i < 100 ? "finished" : "decoding";
  state = reduce(state, { type: "frame", events: [], records: [record(0, statuses)] });
  assert.equal(state.requests.size, MAX_REQUESTS);
  assert.ok(!state.requests.has("r0") && !state.requests.has("r49") && state.requests.has("r50"));
  for (let i = 100; i < MAX_REQUESTS + 50; i++) assert.ok(state.requests.has(`r${i}`));
  for (let step = 1; step < 100; step++) state = reduce(state, { type: "frame", events: [], records: [record(step, {})] });
  assert.equal(state.records.length, HISTORY);
});

test("records already shown are skipped; a snapshot starts over (a replay seek)", () => {
  const r = (step) => record(step, {});
  let state = fold([{ type: "snapshot", meta: META, requests: [], records: [r(5), r(6)] },
    { type: "frame", events: [], records: [r(6), r(7)] }]);
  assert.deepEqual(state.records.map((x) => x.step), [5, 6, 7]);
  state = reduce(state, { type: "snapshot", meta: META, requests: [], records: [r(1)] });
  assert.deepEqual(state.records.map((x) => x.step), [1]);
  assert.equal(state.dirty.all, true);
});

test("a ping changes nothing; a status message replaces the status", () => {
  const state = reduce(initialState(), { type: "snapshot", meta: META, requests: [], records: [], status: { state: "ready" } });
  assert.equal(reduce(state, { type: "ping" }), state);
  const next = reduce(state, { type: "status", status: { state: "dead", error: "boom" } });
  assert.deepEqual(next.status, { state: "dead", error: "boom" });
});

test("a delta delivered twice (a snapshot already held it) changes nothing", () => {
  const delta = { kind: "delta", request_id: "A", time: 2, text: "Hello", token_ids: [1, 2], offset: 0,
    token_offset: 0, color: 0, visible: true, mine: true };
  const once = fold([{ type: "snapshot", meta: META, requests: [], records: [] }, { type: "frame", events: [delta], records: [] }]);
  const twice = reduce(once, { type: "frame", events: [delta], records: [] });
  assert.equal(twice.requests.get("A").text, "Hello");
  assert.equal(twice.requests.get("A").num_output_tokens, 2);
});

// The browser folds request states by the server's rules (engine/request_states.py): one stream,
// both reducers, the same states after every message (tests/data/request_states.json, read by
// tests/test_request_states.py too).
test("the cards' request states are the server reducer's, message by message", () => {
  const url = new URL("../data/request_states.json", import.meta.url);
  const { messages } = JSON.parse(readFileSync(url, "utf-8"));
  let state = initialState();
  for (const [i, m] of messages.entries()) {
    state = reduce(state, { type: "frame", events: m.events || [], records: m.record ? [m.record] : [] });
    const shown = Object.fromEntries([...state.requests].map(([rid, e]) => [rid, e.status]));
    assert.deepEqual(shown, m.expect, `after message ${i}`);
  }
});

// Text past the Basic Multilingual Plane (emoji): the book's offsets count UTF-16 units, as the
// page's strings do, so a delta lands where it belongs, delivered once or twice, after a
// snapshot or not (tests/data/text_deltas.json, checked against viz/live/book.py by
// tests/test_viz_book.py).
test("deltas after an emoji land where they belong, delivered once or twice", () => {
  const url = new URL("../data/text_deltas.json", import.meta.url);
  const { events, text } = JSON.parse(readFileSync(url, "utf-8"));
  const shown = events.map((e) => ({ ...e, color: 0, visible: true, mine: true }));
  const start = { type: "snapshot", meta: META, requests: [], records: [] };
  const once = fold([start, ...shown.map((e) => ({ type: "frame", events: [e], records: [] }))]);
  assert.equal(once.requests.get("A").text, text);
  const twice = fold(shown.map((e) => ({ type: "frame", events: [e, e], records: [] })), fold([start]));
  assert.equal(twice.requests.get("A").text, text);
  const replayed = reduce(once, { type: "frame", events: shown.slice(1), records: [] });
  assert.equal(replayed.requests.get("A").text, text);
});
