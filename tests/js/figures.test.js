// Every figure builder on every record of the shipped trace (with the history the page would
// hold): what the figure says equals the record.
import assert from "node:assert/strict";
import { test } from "node:test";

import { attention } from "../../assets/js/figures/attention.js";
import { blockTables } from "../../assets/js/figures/block_tables.js";
import { timing } from "../../assets/js/figures/timing.js";
import { tokenLayout } from "../../assets/js/figures/token_layout.js";
import { plainText, textWidth } from "../../assets/js/text_fit.js";
import { loadTrace, META, STRINGS, view } from "./fixtures.js";

const { records } = loadTrace();
const windows = records.map((_, i) => records.slice(Math.max(0, i - 39), i + 1));
const role = (figure, name) => figure.data.filter((d) => d.meta && d.meta.role === name);

test("token layout: this step's rows span exactly num_rows on an axis whose full range is the budget", () => {
  for (const history of windows) {
    const record = history[history.length - 1];
    const figure = tokenLayout(history, view({ records: history }));
    const bars = role(figure, "rows");
    assert.equal(bars.length, record.segments.length);
    assert.ok(bars.every((b) => b.xaxis === "x" && b.orientation === "h"));
    assert.deepEqual(figure.layout.xaxis.range, [0, record.token_budget], `step ${record.step}`);
    let next = 0;
    record.segments.forEach((s, i) => {
      assert.deepEqual([bars[i].name, bars[i].base[0], bars[i].x[0]], [s.request_id, next, s.num_rows]);
      next += s.num_rows;
    });
    assert.equal(next, record.num_rows);
    const unused = role(figure, "unused")[0];
    assert.equal(unused.base[0] + unused.x[0], record.token_budget);
  }
});

test("token layout: the zoom strip is the same rows on [0, num_rows], labelled as a zoom", () => {
  for (const history of windows.slice(0, 60)) {
    const record = history[history.length - 1];
    const figure = tokenLayout(history, view({ records: history }));
    const zoom = role(figure, "zoom");
    assert.deepEqual(zoom.map((b) => [b.base[0], b.x[0]]), record.segments.map((s) => [s.row_start, s.num_rows]));
    assert.deepEqual(figure.layout.xaxis3.range, [0, record.num_rows]);
    const labels = figure.layout.annotations.map((a) => plainText(a.text));
    assert.ok(labels.some((l) => l.startsWith("zoom ×") && l.includes(`${record.num_rows} rows`)), labels.join(" | "));
  }
});

test("token layout: the history draws each step's segments, whole steps on x", () => {
  for (const history of [windows[0], windows[100]]) {
    const figure = tokenLayout(history, view({ records: history }));
    const drawn = role(figure, "history").flatMap((t) => t.x.map((step, k) => [step, t.base[k], t.y[k]]));
    const expected = history.flatMap((r) => r.segments.map((s) => [r.step, s.row_start, s.num_rows]));
    assert.deepEqual(drawn.sort(), expected.sort());
  }
  const one = tokenLayout([records[0]], view({ records: [records[0]] })).layout.xaxis2;
  assert.deepEqual([one.autorange, one.range, one.tickmode, one.dtick, one.tickformat], [true, undefined, "linear", 1, "d"]);
});

test("token layout: the title fits its width and says the whole sum, '1 row' for one", () => {
  for (const width of [420, 640, 900]) {
    for (const history of windows) {
      const record = history[history.length - 1];
      const title = tokenLayout(history, view({ width, records: history })).layout.annotations[0];
      for (const line of title.text.split("<br>")) assert.ok(textWidth(line, 14) <= width - 8, line);
      const text = title.hovertext ? plainText(title.hovertext) : plainText(title.text);
      const rows = record.num_rows === 1 ? "1 row of" : `${record.num_rows} rows of`;
      assert.ok(text.includes(`${rows} ${record.token_budget}`), text);
      if (width >= 640) assert.equal(title.hovertext, undefined, `cut at ${width}px: ${text}`);
    }
  }
});

test("token layout: the title wraps between the sum's terms, so no step's title is cut at 540 px", () => {
  for (const history of windows) {
    const record = history[history.length - 1];
    const title = tokenLayout(history, view({ width: 540, lang: "both", records: history })).layout.annotations[0];
    assert.equal(title.hovertext, undefined, plainText(title.text));
    for (const s of record.segments.length <= 6 ? record.segments : []) {
      assert.ok(plainText(title.text).includes(`${s.request_id} ${s.num_rows}`));
    }
  }
});

test("token layout: 'stalled: A35, B36' under prefill_first is shown whole", () => {
  const record = { ...records[50], policy: "prefill_first", segments: [records[50].segments[0]],
    requests: { ...records[50].requests, A35: { status: "decoding" }, B36: { status: "decoding" } } };
  record.num_rows = record.segments[0].num_rows;
  for (const lang of ["en", "both"]) {
    const title = tokenLayout([record], view({ width: 540, lang, records: [record] })).layout.annotations[0];
    assert.equal(title.hovertext, undefined);
    assert.match(plainText(title.text), /stalled: A35, B36/);
  }
});

test("token layout: rows in the scheduler's order (a source that could not read its runner's) say so on screen", () => {
  const noteOf = (record, options) => tokenLayout([record], view({ ...options, records: [record] })).layout.annotations
    .find((a) => a.name === "row_order");
  const packed = { ...records[50], source: { engine: "vllm", version: "0.32.0", row_order: "packed" } };
  assert.equal(noteOf(packed), undefined);
  assert.equal(noteOf(records[50]), undefined);  // a v1 record, from before sources were named: packed
  const scheduled = { ...packed, source: { ...packed.source, row_order: "scheduled" } };
  for (const lang of ["en", "zh"]) {
    const note = noteOf(scheduled, { lang });
    assert.equal(plainText(note.text), STRINGS.views["layout.row_order_scheduled"][lang]);
    assert.equal(plainText(note.hovertext), STRINGS.views["layout.row_order_scheduled_def"][lang]);
  }
  for (const width of [420, 640]) {  // a line of its own above the budget strip's label, whole at the page's sizes
    const figure = tokenLayout([scheduled], view({ lang: "both", width, records: [scheduled] }));
    const note = figure.layout.annotations.find((a) => a.name === "row_order");
    const label = figure.layout.annotations.find((a) => plainText(a.text).startsWith("budget:"));
    assert.equal(plainText(note.text), `rows in the scheduler's order · ${STRINGS.views["layout.row_order_scheduled"].zh}`);
    assert.deepEqual([note.x, note.xanchor, note.yanchor], [label.x, label.xanchor, label.yanchor]);
    const line = 16 / (340 - figure.layout.margin.t - figure.layout.margin.b);  // one 16 px label line
    assert.ok(Math.abs(label.y - figure.layout.yaxis.domain[1]) < 1e-9 && Math.abs(note.y - label.y - line) < 1e-9);
  }
});

test("attention: each segment's rows are cu_seqlens_q's and its keys seq_lens_k's", () => {
  for (const history of windows) {
    const record = history[history.length - 1];
    const figure = attention(history, view({ records: history }));
    const segments = role(figure, "segment");
    assert.equal(segments.length, record.segments.length);
    segments.forEach((trace, i) => {
      const cu = record.cu_seqlens_q;
      assert.deepEqual([Math.min(...trace.y), Math.max(...trace.y)], [cu[i], cu[i + 1]], `step ${record.step}`);
      assert.equal(Math.max(...trace.x) - Math.min(...trace.x), record.segments[i].num_rows);
      assert.equal(trace.meta.keys, record.seq_lens_k[i]);
      const cached = role(figure, "cached").find((c) => c.meta.rid === trace.meta.rid);
      assert.equal(cached ? cached.meta.cached : 0, record.seq_lens_k[i] - (cu[i + 1] - cu[i]));
    });
    const header = plainText(figure.layout.annotations[0].text);
    if (record.cu_seqlens_q.length <= 10) assert.ok(header.includes(`cu_seqlens_q = [${record.cu_seqlens_q.join(", ")}]`));
  }
});

test("attention: key labels never overlap each other (pixel estimate) and name seq_lens_k", () => {
  for (const width of [460, 640]) {
    for (const history of windows) {
      const record = history[history.length - 1];
      const { layout } = attention(history, view({ width, records: history }));
      const px = (width - layout.margin.l - layout.margin.r) / layout.xaxis.range[1];
      const spans = layout.xaxis.tickvals.map((v, i) => {
        const half = textWidth(layout.xaxis.ticktext[i], 12) / 2;
        return [v * px - half, v * px + half];
      });
      for (let i = 1; i < spans.length; i++) assert.ok(spans[i][0] >= spans[i - 1][1], `step ${record.step}`);
      const keys = new Set(record.seq_lens_k.map(String));
      for (const label of layout.xaxis.ticktext) assert.ok(keys.has(plainText(label).split(" ").pop()), label);
    }
  }
});

test("block tables: every cell is the record's block id", () => {
  for (const history of windows) {
    const record = history[history.length - 1];
    const figure = blockTables(history, view({ records: history }));
    const [tables] = role(figure, "tables");
    const ids = Object.keys(record.block_tables).slice(0, 16);
    assert.deepEqual(tables.y, ids);
    ids.forEach((rid, i) => {
      const cells = tables.text[i].filter((c) => c !== "");
      assert.deepEqual(cells, record.block_tables[rid].slice(0, 64).map(String), `${rid} at step ${record.step}`);
    });
    const [pool] = role(figure, "pool");
    assert.equal(pool.z.flat().filter((z) => z !== null).length, record.kv.num_blocks);
  }
});

test("block tables: the two panel titles each fit their half", () => {
  for (const width of [560, 660]) {
    const { layout } = blockTables([records[120]], view({ width, records: [records[120]] }));
    const [left, right] = layout.annotations;
    const plot = width - layout.margin.l - layout.margin.r;
    const leftEnd = Math.max(...left.text.split("<br>").map((l) => textWidth(l, 14))) + 4;
    const rightStart = width - layout.margin.r - Math.max(...right.text.split("<br>").map((l) => textWidth(l, 14)));
    assert.ok(leftEnd <= layout.margin.l + plot * 0.52 + 4 && leftEnd < rightStart, `${width}px`);
  }
});

test("block tables: a pool without per-block lists is drawn as counts", () => {
  const record = { ...records[10], kv: { ...records[10].kv, ref_counts: null, owners: null, cached: null } };
  const figure = blockTables([record], view({ records: [record] }));
  assert.equal(role(figure, "pool").length, 0);
  assert.ok(plainText(figure.layout.annotations.at(-1).text).startsWith(`${record.kv.num_blocks} blocks`));
  assert.equal(role(figure, "tables")[0].text[0][0], String(record.block_tables[Object.keys(record.block_tables)[0]][0]));
});

test("timing: a bar per declared phase plus the rest of the total, whole steps on x", () => {
  for (const history of [windows[0], windows[200]]) {
    const figure = timing(history, view({ records: history }));
    const phases = role(figure, "phase");
    assert.deepEqual(phases.map((p) => p.meta.phase), [...META.phases.map((p) => p.name), "other"]);
    history.forEach((r, k) => {
      const sum = phases.reduce((a, p) => a + p.y[k], 0);
      assert.ok(Math.abs(sum - Math.max(r.durations_ms.total, sum - phases.at(-1).y[k])) < 1e-6);
    });
    assert.deepEqual(role(figure, "rows")[0].y, history.map((r) => r.num_rows));
    assert.equal(figure.layout.xaxis2.tickformat, "d");
  }
});

test("empty views say so in the viewer's language", () => {
  for (const build of [tokenLayout, blockTables, attention, timing]) {
    const figure = build([], view({ lang: "zh", records: [] }));
    assert.equal(figure.data.length, 0);
    assert.match(figure.layout.annotations[0].text, /[\u4e00-\u9fff]/);
  }
});

test("zoom and pan survive redraws: every figure keeps one uirevision from step to step", () => {
  for (const build of [tokenLayout, blockTables, attention, timing]) {
    const revision = build(windows[30], view({ records: windows[30] })).layout.uirevision;
    assert.ok(revision);
    assert.equal(build(windows[31], view({ records: windows[31] })).layout.uirevision, revision);
  }
});

test("block tables: the pool legend adds up and says which cached blocks are free", () => {
  for (const record of records.filter((r) => r.kv.cached && r.kv.num_cached)) {
    const { layout } = blockTables([record], view({ records: [record], width: 440 }));
    const legend = plainText(layout.xaxis2.title.text).replace(/■ /g, "").replace(/\s+/g, " ");
    const kv = record.kv, used = kv.num_blocks - kv.num_free;
    const cachedFree = kv.cached.filter((b) => kv.ref_counts[b] === 0).length;
    assert.ok(legend.includes(`${used} used + ${kv.num_free} free = ${kv.num_blocks}`), legend);
    assert.ok(legend.includes(`${kv.num_cached} cached (${cachedFree} free)`), legend);
    assert.ok(!legend.includes("…"), legend);
    const both = blockTables([record], view({ records: [record], width: 440, lang: "both" })).layout.xaxis2.title.text;
    assert.ok(!plainText(both).includes("…"), both);
  }
});

const integerTicks = (ax) => ax.tickformat === "d" && ax.tickmode === "linear" && Number.isInteger(ax.dtick) && ax.dtick >= 1;

test("token layout: the history is on its window's own rows (headroom, not the budget), integer ticks, budget line when near", () => {
  for (const history of windows) {
    const record = history.at(-1), most = Math.max(...history.map((r) => r.num_rows));
    const { layout } = tokenLayout(history, view({ records: history }));
    const [, top] = layout.yaxis2.range;
    assert.ok(top >= most && top <= Math.max(Math.ceil(most * 1.15), Math.ceil(record.token_budget * 1.08), 1), `step ${record.step}: ${top}`);
    assert.ok(integerTicks(layout.yaxis2) && integerTicks(layout.xaxis), `step ${record.step}`);
    const line = (layout.shapes || []).find((s) => s.name === "budget");
    assert.equal(Boolean(line), record.token_budget <= top, `step ${record.step}`);
    if (line) assert.ok(layout.annotations.some((a) => a.name === "budget" && plainText(a.text) === `budget ${record.token_budget}`));
    assert.deepEqual(layout.xaxis.range, [0, record.token_budget]);  // the strip stays on the budget's scale
  }
  const decodes = windows.find((w) => w.every((r) => r.num_rows <= 6));
  assert.ok(tokenLayout(decodes, view({ records: decodes })).layout.yaxis2.range[1] <= 7);
});

test("timing: rows on the window's own range, a spike clipped and marked with its true value, integer ticks", () => {
  for (const history of windows) {
    const figure = timing(history, view({ records: history })), ax = figure.layout.yaxis2;
    assert.ok(integerTicks(ax), `step ${history.at(-1).step}`);
    const [rows] = role(figure, "rows"), [padded] = role(figure, "padded"), clipped = role(figure, "clipped");
    assert.ok([...rows.y, ...padded.y].every((y) => y <= ax.range[1]));
    const over = history.filter((r) => Math.max(r.num_rows, r.padded_rows) > ax.range[1]);
    assert.deepEqual(clipped.flatMap((c) => c.x), over.map((r) => r.step));
    if (over.length) assert.ok(clipped[0].text.includes(`▲${Math.max(...over.map((r) => r.padded_rows))}`));
    assert.deepEqual(rows.customdata, history.map((r) => r.num_rows));
  }
  const spiky = windows.find((w) => w.some((r) => r.padded_rows === 186) && w.filter((r) => r.num_rows <= 6).length > 36);
  const figure = timing(spiky, view({ records: spiky }));
  assert.ok(figure.layout.yaxis2.range[1] < 30 && role(figure, "clipped").length, String(figure.layout.yaxis2.range));
  const ones = windows.at(-1).slice(-15);
  assert.ok(ones.every((r) => r.num_rows === 1));
  const axOne = timing(ones, view({ records: ones })).layout.yaxis2;
  assert.equal(axOne.dtick, 1);  // "0, 1, 2", never "0, 1, 1"
});

test("an empty view's message fits its figure in every language mode, at the stage's panel width", () => {
  for (const lang of ["en", "zh", "both"]) {
    for (const [build, key] of [[tokenLayout, "empty.layout"], [blockTables, "empty.blocks"], [attention, "empty.attention"]]) {
      const v = view({ lang, width: 470, height: 300 });
      const [note] = build([], v).layout.annotations;
      const lines = note.text.split("<br>");
      const width = Math.max(...lines.map((line) => textWidth(line, note.font.size)));
      assert.ok(width <= 470 - 32, `${key} (${lang}) is ${Math.round(width)} px wide in 438 px: ${note.text}`);
      assert.equal(plainText(note.text).replace(/[ ·]/g, ""), v.t.parts(key).join("").replace(/[ ·]/g, ""));
    }
  }
});
