// Compare, computed from records and arrivals: the table's numbers are the records' own, and
// every string the autopsy and the compare ask for by a computed key is in the table.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CAUSES, LANE_STATES, TTFT_PARTS } from "../../assets/js/autopsy.js";
import { better, quantile, runOf, TABLE_ROWS, visibleRecords } from "../../assets/js/compare.js";
import { loadTrace, STRINGS } from "./fixtures.js";

function traceSide(label = "A") {
  const { entries, records } = loadTrace();
  const arrivals = entries.filter((e) => e.type === "event" && e.data.kind === "arrival").map((e) => e.data);
  return { label, config: { policy: "mixed", max_num_batched_tokens: 64 }, records, arrivals };
}

test("quantiles are nearest rank", () => {
  const values = Array.from({ length: 93 }, (_, i) => i + 1);
  assert.equal(quantile(values, 0.99), 93);
  assert.equal(quantile(values, 0.5), 47);
  assert.equal(quantile([3, 1, 2], 0.5), 2);
  assert.equal(quantile([5], 0.99), 5);
  assert.equal(quantile([], 0.5), null);
});

test("a run's table is its records': TTFT from arrival to the first token's step end, every ITL gap", () => {
  const side = traceSide();
  const run = runOf(side);
  const first = new Map(), times = new Map();
  for (const r of side.records) {
    for (const s of r.segments) {
      if (!s.sampled) continue;
      if (!first.has(s.request_id)) first.set(s.request_id, r.t_end);
      times.set(s.request_id, [...(times.get(s.request_id) || []), r.t_end]);
    }
  }
  const ttfts = side.arrivals.map((a) => first.get(a.request_id) - a.time);
  const gaps = [...times.values()].flatMap((ts) => ts.slice(1).map((t, i) => t - ts[i]));
  assert.equal(run.itl.length, gaps.length);
  assert.ok(Math.abs(run.table.ttft_p50 - quantile(ttfts, 0.5)) < 1e-9);
  assert.ok(Math.abs(run.table.ttft_p99 - quantile(ttfts, 0.99)) < 1e-9);
  assert.ok(Math.abs(run.table.itl_p99 - quantile(gaps, 0.99)) < 1e-9);
  assert.deepEqual([run.table.steps, run.table.preemptions, run.table.stalls], [side.records.length, 2, 0]);
  assert.equal(run.t0, side.arrivals[0].time);
  assert.ok(Math.abs(run.duration - (side.records.at(-1).t_end - run.t0)) < 1e-9);
});

test("the cursor shows the records that had ended by then; the better side is the lower", () => {
  const run = runOf(traceSide());
  assert.equal(visibleRecords(run, -1).length, 0);
  assert.equal(visibleRecords(run, run.duration).length, run.records.length);
  const mid = run.records[100].t_end - run.t0;
  assert.equal(visibleRecords(run, mid).at(-1).step, run.records[100].step);
  const b = { ...run, label: "B", table: { ...run.table, itl_p99: run.table.itl_p99 * 2, stalls: 5 } };
  const best = better([run, b]);
  assert.equal(best.itl_p99, "A");
  assert.equal(best.stalls, "A");
  assert.equal(best.steps, null);
});

test("a decoding request that gets no row is a stall, counted per request and step", () => {
  const record = (step, t, segments, statuses) => ({ step, t_start: t, t_end: t + 1, num_rows: segments.length,
    token_budget: 8, policy: "prefill_first", segments: segments.map((rid, i) => ({ request_id: rid, kind: rid === "C" ? "prefill" : "decode",
      row_start: i, num_rows: 1, num_cached: 4, num_keys: 5, sampled: true })),
    requests: Object.fromEntries(Object.entries(statuses).map(([rid, [status, outputs]]) => [rid, { status, num_prompt_tokens: 4,
      num_computed_tokens: 5, num_output_tokens: outputs, prefill_target: 4 }])), admitted: {}, preempted: [], finished: {}, block_tables: {}, kv: {} });
  const side = { label: "B", config: {}, arrivals: [{ kind: "arrival", request_id: "A", time: 0 }, { kind: "arrival", request_id: "C", time: 0.5 }],
    records: [record(0, 0, ["A"], { A: ["decoding", 1] }), record(1, 1, ["C"], { A: ["decoding", 1], C: ["decoding", 1] }),
      record(2, 2, ["A", "C"], { A: ["decoding", 2], C: ["decoding", 2] })] };
  const run = runOf(side);
  assert.equal(run.table.stalls, 1);
  const stalled = run.itl.find((k) => k.rid === "A" && k.step === 2);
  assert.equal(stalled.cause, "stalled");
  assert.deepEqual([stalled.by.rid, stalled.by.step], ["C", 1]);
});

test("every string asked for by a computed key is in the table", () => {
  const keys = [...LANE_STATES.flatMap((s) => [`autopsy.state_${s}`, `autopsy.state_${s}_def`]),
    ...TTFT_PARTS.flatMap((p) => [`autopsy.part_${p}`, `autopsy.part_${p}_def`]),
    ...CAUSES.flatMap((c) => [`autopsy.cause_${c}`, `autopsy.cause_${c}_def`]),
    ...TABLE_ROWS.flatMap((r) => [`compare.row_${r}`, `compare.row_${r}_def`]),
    ...["layout", "itl", "ttft"].map((c) => `compare.caption_${c}`),
    ...["waited", "waited_again", "decoding", "stalled", "unseen"].map((k) => `autopsy.story_${k}`)];
  assert.deepEqual(keys.filter((k) => !(k in STRINGS.views)), []);
});
