// A step that scheduled no tokens (vLLM runs one right after requests finish) never replaces the
// last step that ran work as the one the views show (shown_step.js); it stays in the histories.
import assert from "node:assert/strict";
import { test } from "node:test";

import { attention } from "../../assets/js/figures/attention.js";
import { blockTables } from "../../assets/js/figures/block_tables.js";
import { timing } from "../../assets/js/figures/timing.js";
import { tokenLayout } from "../../assets/js/figures/token_layout.js";
import { followStep, NOTHING_SHOWN, shownStep } from "../../assets/js/shown_step.js";
import { HISTORY, initialState, reduce } from "../../assets/js/state.js";
import { plainText } from "../../assets/js/text_fit.js";
import { loadTrace, traceMessages, view, VLLM_TRACE } from "./fixtures.js";

const { records } = loadTrace(VLLM_TRACE);
const LAST = records.length - 1;  // the run's last step: an empty one after five requests finished
const BUILDERS = { tokenLayout, blockTables, attention, timing };
const emptyStep = (record, step) => ({ ...record, step, num_rows: 0, padded_rows: 0, segments: [],
  cu_seqlens_q: [0], seq_lens_k: [], block_tables: {}, sampled: {} });
const rows = (figure) => figure.data.filter((d) => d.meta && d.meta.role === "rows").map((d) => [d.name, d.base[0], d.x[0]]);

test("the shipped vLLM trace ends with an empty step that freed the finished requests' blocks", () => {
  assert.equal(records[LAST].num_rows, 0);
  assert.ok(records[LAST - 1].num_rows > 0);
  const shown = shownStep(records);
  assert.equal(shown.record, records[LAST - 1]);
  assert.equal(shown.empty, 1);
  assert.equal(shown.freed, records[LAST].kv.num_free - records[LAST - 1].kv.num_free);
  assert.ok(shown.freed > 0);
});

test("every record with work is shown as it comes; empty steps are counted after it", () => {
  let shown = NOTHING_SHOWN;
  for (const record of records) {
    shown = followStep(shown, record);
    if (record.num_rows) assert.deepEqual(shown, { record, empty: 0, freed: 0 });
    else assert.ok(shown.record && shown.record.num_rows > 0 && shown.empty >= 1);
  }
  const two = followStep(followStep(followStep(NOTHING_SHOWN, records[5]), emptyStep(records[5], 6)), emptyStep(records[5], 7));
  assert.deepEqual([two.record.step, two.empty], [records[5].step, 2]);
});

test("the views draw the step with work and its title says what followed", () => {
  const history = records.slice(LAST - 10);
  for (const lang of ["en", "zh"]) {
    const figure = tokenLayout(history, view({ lang, width: 1200, records: history }));
    const worked = tokenLayout(history.slice(0, -1), view({ lang, width: 1200, records: history.slice(0, -1) }));
    assert.deepEqual(rows(figure), rows(worked));
    const title = plainText(figure.layout.annotations[0].text);
    const freed = records[LAST].kv.num_free - records[LAST - 1].kv.num_free;
    const said = lang === "en" ? [`step ${LAST - 1}:`, "then 1 empty step", `${freed} blocks freed`]
      : [`第 ${LAST - 1} 步:`, "之后 1 个空步", `释放 ${freed} 块`];
    for (const words of said) assert.ok(title.includes(words), `${title} lacks ${words}`);
  }
  for (const build of [blockTables, attention]) {
    const withEmpty = build(history, view({ records: history }));
    const without = build(history.slice(0, -1), view({ records: history.slice(0, -1) }));
    assert.deepEqual(withEmpty.data, without.data);
  }
});

test("the histories keep the empty step: the timing view draws it with its time and no rows", () => {
  const history = records.slice(LAST - 10);
  const figure = timing(history, view({ records: history }));
  const rowBars = figure.data.find((d) => d.meta && d.meta.role === "rows");
  assert.deepEqual([rowBars.x.at(-1), rowBars.y.at(-1)], [records[LAST].step, 0]);
  const stats = plainText(figure.layout.xaxis2.title.text);
  assert.ok(stats.includes(`last ${records[LAST - 1].durations_ms.total.toFixed(0)} ms`), stats);
  const layout = tokenLayout(history, view({ records: history }));
  assert.ok(layout.layout.xaxis2.autorange && history.every((r) => r.step <= records[LAST].step));
});

test("while every record so far is empty, every view shows what it shows with no data", () => {
  const empties = [emptyStep(records[0], 0), emptyStep(records[0], 1)];
  for (const [name, build] of Object.entries(BUILDERS)) {
    assert.deepEqual(build(empties, view({ records: empties })), build([], view()), name);
  }
});

test("the reducer keeps the shown step, also once it has left the history", () => {
  let state = traceMessages(7, VLLM_TRACE).reduce(reduce, initialState());
  assert.equal(state.shown.record.step, records[LAST - 1].step);
  assert.equal(state.shown.empty, 1);
  const more = Array.from({ length: HISTORY + 5 }, (_, i) => emptyStep(records[LAST], records[LAST].step + 1 + i));
  state = reduce(state, { type: "frame", records: more, events: [] });
  assert.ok(!state.records.some((r) => r.num_rows > 0));
  assert.deepEqual([state.shown.record.step, state.shown.empty], [records[LAST - 1].step, HISTORY + 6]);
  state = reduce(state, { type: "snapshot", records: state.records, requests: [] });
  assert.equal(state.shown.record, null, "a snapshot of empty steps only: nothing to show, as with no data");
});
