// The stage layout's logic: its URL, the presenter's keys (what each does, and why one does
// nothing), looking back at an earlier step while paused (and the newest back with a new
// record), and chart text of at least 14 px in every view it draws.
import assert from "node:assert/strict";
import { test } from "node:test";

import { attention } from "../../assets/js/figures/attention.js";
import { blockTables } from "../../assets/js/figures/block_tables.js";
import { timing } from "../../assets/js/figures/timing.js";
import { tokenLayout } from "../../assets/js/figures/token_layout.js";
import { earlierStep, laterStep, viewedHistory } from "../../assets/js/look_back.js";
import { STAGE_TEXT_PX, stageInUrl, stageUrl } from "../../assets/js/stage.js";
import { keyAction } from "../../assets/js/stage_keys.js";
import { initialState, reduce } from "../../assets/js/state.js";
import { loadTrace, META, view } from "./fixtures.js";

const { records } = loadTrace();
const worked = records.filter((r) => r.num_rows > 0);
const emptyStep = (record, step) => ({ ...record, step, num_rows: 0, padded_rows: 0, segments: [],
  cu_seqlens_q: [0], seq_lens_k: [], block_tables: {}, sampled: {} });

function stateOf(history) {
  const state = reduce(initialState(), { type: "snapshot", viewer: "v1", meta: META, requests: [], records: [] });
  return reduce(state, { type: "frame", events: [], records: history });
}

test("?layout=stage asks for the stage; the toggle's URL keeps every other parameter", () => {
  assert.equal(stageInUrl("http://h:7860/?layout=stage"), true);
  assert.equal(stageInUrl("http://h:7860/?lang=zh"), false);
  assert.equal(stageUrl("http://h:7860/?x=1", true), "http://h:7860/?x=1&layout=stage");
  assert.equal(stageUrl("http://h:7860/?layout=stage&x=1", false), "http://h:7860/?x=1");
});

test("keys: space pauses or resumes, → steps (or goes forward when looking back), ← looks back while paused", () => {
  const at = (key, paused, lookingBack = false, keyTyped = true) => keyAction(key, { paused, lookingBack, keyTyped });
  assert.deepEqual([at(" ", false), at(" ", true)], ["pause", "resume"]);
  assert.deepEqual([at("ArrowRight", true), at("ArrowRight", false), at("ArrowRight", true, true)], ["step", "step", "later"]);
  assert.deepEqual([at("ArrowLeft", true), at("ArrowLeft", false)], ["earlier", "pause_first"]);
  assert.deepEqual([at("f", false), at("F", true), at("x", true), at("Enter", true)], ["fire", "fire", null, null]);
  assert.deepEqual([at("s", false), at("S", true), at("p", false), at("P", true)], ["slow", "slow", "preset", "preset"]);
});

test("an empty presenter key box: the engine's keys say so instead of acting; looking back needs no key", () => {
  const noKey = (key, paused, lookingBack = false) => keyAction(key, { paused, lookingBack, keyTyped: false });
  assert.deepEqual([noKey(" ", false), noKey(" ", true), noKey("ArrowRight", true)], ["key_needed", "key_needed", "key_needed"]);
  assert.deepEqual([noKey("ArrowLeft", true), noKey("ArrowRight", true, true), noKey("f", true)], ["earlier", "later", "fire"]);
});

test("← shows the step with work before the one shown, its history cut there; → goes back to the newest", () => {
  const history = [...worked.slice(10, 14), emptyStep(worked[13], worked[13].step + 1)];
  let state = stateOf(history);
  assert.equal(viewedHistory(state).shown.record, worked[13]);
  state = reduce(state, { type: "look", until: earlierStep(state) });
  const viewed = viewedHistory(state);
  assert.equal(viewed.shown.record, worked[12]);
  assert.deepEqual(viewed.records, history.slice(0, 3));
  state = reduce(state, { type: "look", until: earlierStep(state) });
  assert.equal(viewedHistory(state).shown.record, worked[11]);
  state = reduce(state, { type: "look", until: laterStep(state) });
  assert.equal(viewedHistory(state).shown.record, worked[12]);
  assert.equal(laterStep(state), null);  // the next step with work is the newest: live again
  state = reduce(state, { type: "look", until: laterStep(state) });
  assert.deepEqual(viewedHistory(state), { records: state.records, shown: state.shown });
});

test("← at the oldest step of the history stays there; a new record brings the newest back", () => {
  let state = stateOf(worked.slice(20, 22));
  state = reduce(state, { type: "look", until: earlierStep(state) });
  assert.equal(state.until, worked[20].step);
  assert.equal(earlierStep(state), worked[20].step);
  state = reduce(state, { type: "frame", events: [], records: [worked[22]] });
  assert.equal(state.until, null);
  assert.equal(viewedHistory(state).shown.record, worked[22]);
});

// Every font size a figure asks for (layout, axes, annotations, traces), with where it is.
function fontSizes(figure) {
  const found = [];
  const walk = (value, path) => {
    if (!value || typeof value !== "object") return;
    if (/(font|uniformtext)$/.test(path) && typeof (value.size ?? value.minsize) === "number") found.push([path, value.size ?? value.minsize]);
    for (const [key, inner] of Object.entries(value)) walk(inner, `${path}.${key}`);
  };
  walk(figure.layout, "layout");
  figure.data.forEach((trace, i) => walk(trace, `data[${i}]`));
  return found;
}

test("the stage's views ask for no text under 14 px; the default's keep their own sizes", () => {
  const history = worked.slice(30, 70);
  for (const build of [tokenLayout, blockTables, attention, timing]) {
    for (const lang of ["en", "zh", "both"]) {
      const stage = { ...view({ lang, width: 470, height: 280, records: history }), minText: STAGE_TEXT_PX };
      const sizes = fontSizes(build(history, stage));
      assert.ok(sizes.length > 3, build.name);
      assert.deepEqual(sizes.filter(([, size]) => size < STAGE_TEXT_PX), [], `${build.name} in ${lang}`);
    }
    const plain = fontSizes(build(history, view({ width: 640, height: 340, records: history })));
    assert.ok(plain.some(([, size]) => size < STAGE_TEXT_PX), build.name);
  }
});
