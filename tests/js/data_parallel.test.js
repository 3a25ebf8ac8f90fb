// A data-parallel vLLM engine (one scheduler per rank, merged by the ingest into one stream whose
// records carry source.data_parallel_rank and source.rank_step): the views say which rank ran
// the step shown and whose KV pool they draw, the history marks each rank's steps, the header
// names the ranks attached and counts each one.
import assert from "node:assert/strict";
import { test } from "node:test";

import { blockTables } from "../../assets/js/figures/block_tables.js";
import { tokenLayout } from "../../assets/js/figures/token_layout.js";
import { statusParts } from "../../assets/js/header.js";
import { rankOf, shownStep } from "../../assets/js/shown_step.js";
import { plainText } from "../../assets/js/text_fit.js";
import { loadTrace, t, view, VLLM_TRACE } from "./fixtures.js";

const { records } = loadTrace(VLLM_TRACE);
// The trace's steps 30-39 as if two ranks had taken turns: even steps rank 0, odd ones rank 1.
const ranked = records.slice(30, 40).map((r, i) => ({ ...r, step: i,
  source: { ...r.source, data_parallel_rank: i % 2, rank_step: Math.floor(i / 2) } }));
const empty = (record, step, free) => ({ ...record, step, num_rows: 0, padded_rows: 0, segments: [], cu_seqlens_q: [0],
  seq_lens_k: [], block_tables: {}, sampled: {}, kv: { ...record.kv, num_free: free } });
const title = (figure) => plainText(figure.layout.annotations[0].text);
const attached = { source: "attach", state: "ready", model: "m", engine: { name: "vllm", version: "0.32.0" },
  counts: { pending: 0, waiting: 3, running: 5 },
  data_parallel: { size: 2, ranks: [{ rank: 0, waiting: 1, running: 2 }, { rank: 1, waiting: 2, running: 3 }] } };

test("a record names its rank only when the ingest merged the ranks of a data-parallel engine", () => {
  assert.equal(rankOf(ranked[3]), 1);
  assert.equal(rankOf({ ...ranked[3], source: { ...ranked[3].source, rank_step: undefined } }), null);
  assert.equal(rankOf(records[3]), null);
});

test("the token layout's title and the KV pool's title say which rank ran the step shown", () => {
  for (const [lang, step, pool] of [["en", "step 9 (rank 1):", "rank 1 · KV pool"], ["zh", "第 9 步（rank 1）:", "rank 1 · KV 池"]]) {
    assert.ok(title(tokenLayout(ranked, view({ lang, width: 900, records: ranked }))).startsWith(step));
    const blocks = blockTables(ranked, view({ lang, width: 900, records: ranked }));
    assert.ok(blocks.layout.annotations.some((a) => plainText(a.text).replace(/\s+/g, " ").startsWith(pool)));
  }
  assert.ok(title(tokenLayout(records.slice(30, 40), view({ records: records.slice(30, 40) }))).startsWith("step 39:"));
});

test("the history marks each rank's steps with its own symbol, keyed under the axis", () => {
  const figure = tokenLayout(ranked, view({ width: 900, records: ranked }));
  const marks = figure.data.filter((d) => d.meta && d.meta.role === "rank");
  assert.deepEqual(marks.map((m) => [m.meta.rank, m.x]), [[0, [0, 2, 4, 6, 8]], [1, [1, 3, 5, 7, 9]]]);
  assert.notEqual(marks[0].marker.symbol, marks[1].marker.symbol);
  assert.deepEqual(marks[1].y.map((y, k) => y > ranked[2 * k + 1].num_rows), [true, true, true, true, true]);
  const key = plainText(figure.layout.xaxis2.title.text);
  assert.ok(key.includes("● rank 0") && key.includes("◆ rank 1"), key);
  assert.deepEqual(tokenLayout(records.slice(30, 40), view({ records: records.slice(30, 40) })).data
    .filter((d) => d.meta && ["rank", "empty"].includes(d.meta.role)), [], "one rank, no empty step: no marks");
});

test("an empty step frees blocks of its own rank's pool only", () => {
  const [last] = ranked.slice(-1);  // rank 1's
  const other = empty(ranked[8], 10, 999);  // rank 0's empty step: another pool
  const own = empty(last, 11, last.kv.num_free + 4);
  assert.deepEqual(shownStep([...ranked, other]), { record: last, empty: 1, freed: 0 });
  assert.deepEqual(shownStep([...ranked, other, own]), { record: last, empty: 2, freed: 4 });
});

test("the header names the ranks attached and counts each, besides the total", () => {
  const parts = statusParts(attached, null, t(), "ws");
  assert.equal(parts.find((p) => p.part === "data-parallel").text, "data parallel 2: ranks 0, 1");
  assert.deepEqual(parts.filter((p) => p.part === "rank").map((p) => [p.text, p.data]), [
    ["rank 0: 1 waiting, 2 running", { rank: 0, waiting: 1, running: 2 }],
    ["rank 1: 2 waiting, 3 running", { rank: 1, waiting: 2, running: 3 }]]);
  assert.equal(parts.find((p) => p.part === "counts").text, "0 pending · 3 waiting · 5 running");
  const zh = statusParts(attached, null, t("zh"), "ws");
  assert.equal(zh.find((p) => p.part === "data-parallel").text, "数据并行 2：rank 0, 1");
  assert.equal(zh.find((p) => p.part === "rank").text, "rank 0: 1 排队, 2 运行");
  const single = statusParts({ ...attached, data_parallel: undefined }, null, t(), "ws");
  assert.ok(!single.some((p) => ["data-parallel", "rank"].includes(p.part)));
});
