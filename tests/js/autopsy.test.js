// The request autopsy computed from the shipped traces: Batchscope's own (chunked prefill,
// prefix caching, two preemptions) and vLLM's through its plugin (the article's scenario, then
// chat questions): lanes match the records, TTFT parts add up to the TTFT.
import assert from "node:assert/strict";
import { test } from "node:test";

import { autopsy, roundedParts, TTFT_PARTS } from "../../assets/js/autopsy.js";
import { story, tokenWhy } from "../../assets/js/autopsy_story.js";
import { LaneBook, MAX_LANES } from "../../assets/js/lanes.js";
import { plainText } from "../../assets/js/text_fit.js";
import { loadTrace, t, TRACE, traceMessages, VLLM_TRACE } from "./fixtures.js";

const TRACES = { batchscope: TRACE, vllm: VLLM_TRACE };

function fullBook(path = TRACE) {
  const book = new LaneBook();
  for (const message of traceMessages(5, path)) book.apply(message);
  return book;
}

const arrivals = (path = TRACE) => new Map(loadTrace(path).entries
  .filter((e) => e.type === "event" && e.data.kind === "arrival").map((e) => [e.data.request_id, e.data.time]));
const sum = (parts) => Object.values(parts).reduce((a, b) => a + b, 0);
const close = (a, b, what) => assert.ok(Math.abs(a - b) < 1e-6, `${what}: ${a} != ${b}`);

for (const [source, path] of Object.entries(TRACES)) {
  test(`${source}: every request's lane holds exactly the steps the records show it in, with its segments`, () => {
    const { records } = loadTrace(path);
    const book = fullBook(path);
    assert.ok(arrivals(path).size >= 9);
    for (const rid of arrivals(path).keys()) {
      const lane = autopsy(book, rid);
      const steps = records.filter((r) => rid in r.requests || r.segments.some((s) => s.request_id === rid));
      assert.deepEqual(lane.entries.map((e) => e.step), steps.map((r) => r.step), rid);
      for (const [e, r] of lane.entries.map((entry, i) => [entry, steps[i]])) {
        const s = r.segments.find((x) => x.request_id === rid);
        assert.deepEqual(e.seg && [e.seg.kind, e.seg.rows, e.seg.cached], s ? [s.kind, s.num_rows, s.num_cached] : null);
        assert.equal(e.stepRows, r.num_rows);
      }
      assert.deepEqual(lane.missing, []);
      assert.equal(lane.startKnown, true);
    }
  });

  test(`${source}: TTFT parts are a partition: they add up to first token minus arrival, for every request`, () => {
    const { records } = loadTrace(path);
    const book = fullBook(path);
    for (const [rid, arrival] of arrivals(path)) {
      const a = autopsy(book, rid);
      const first = records.find((r) => r.segments.some((s) => s.request_id === rid && s.sampled));
      close(a.ttft.total, first.t_end - arrival, `${rid} TTFT`);
      assert.equal(a.ttft.step, first.step, rid);
      close(sum(a.ttft.parts), a.ttft.total, `${rid} parts`);
      assert.equal(a.ttft.parts.unknown, 0, rid);
      assert.deepEqual(Object.keys(a.ttft.parts), TTFT_PARTS);
      // prefill: the request's own share (by rows) of each step that computed its prompt
      const own = records.filter((r) => r.step <= first.step).reduce((total, r) => {
        const s = r.segments.find((x) => x.request_id === rid);
        return total + (s ? ((r.t_end - r.t_start) * s.num_rows) / r.num_rows : 0);
      }, 0);
      close(a.ttft.parts.prefill + a.ttft.parts.preempted, own, `${rid} own share`);
      const rounded = roundedParts(a.ttft.parts, a.ttft.total);
      assert.equal(sum(rounded), Math.round(a.ttft.total * 1000), rid);
    }
  });
}

test("vllm: the article's step packs A's and B's decodes with C's whole prefill, and each lane says so", () => {
  const { records } = loadTrace(VLLM_TRACE);
  const book = fullBook(VLLM_TRACE);
  const step = records.find((r) => r.num_rows === 102);
  assert.deepEqual(step.cu_seqlens_q, [0, 1, 2, 102]);
  const [a, b, c] = step.segments.map((s) => s.request_id);
  const lane = autopsy(book, c);
  const prefill = lane.entries.find((e) => e.step === step.step);
  assert.deepEqual([prefill.seg.kind, prefill.seg.rows, prefill.stepRows], ["prefill", 100, 102]);
  assert.deepEqual(prefill.others.top.map((o) => [o.rid, o.rows]), [[a, 1], [b, 1]]);
  assert.equal(lane.ttft.step, step.step);  // its first token: sampled from its prefill's last row
  assert.ok(lane.ttft.parts.prefill > 0 && lane.ttft.parts.others > 0);
  const line = story(lane).find((l) => l.key === "autopsy.story_chunk_shared");
  assert.deepEqual([line.from, line.vars.rows, line.vars.others], [step.step, 100, `${a} 1 + ${b} 1`]);
  for (const rid of [a, b]) {
    const token = autopsy(book, rid).tokens.find((k) => k.step === step.step);
    assert.deepEqual([token.cause, token.by], ["shared", { step: step.step, rid: c, kind: "prefill", rows: 100, stepRows: 102 }]);
    assert.match(plainText(tokenWhy(token, t("en"))), new RegExp(`step ${step.step} also carried ${c}'s 100-row prefill \\(102 rows in all\\)`));
  }
});

test("r11: preempted at step 206 (10 blocks freed, 160 tokens lost), back at 234 with 96 from the cache", () => {
  const a = autopsy(fullBook(), "r11");
  const preempted = a.entries.find((e) => e.preempted);
  assert.deepEqual([preempted.step, preempted.preempted], [206, { blocks: 10, lost: 160 }]);
  const back = a.entries.find((e) => e.step === 234);
  assert.deepEqual([back.hit.tokens, back.hit.blocks.length], [96, 6]);
  assert.deepEqual(a.entries.filter((e) => e.step >= 234 && e.seg && e.seg.recompute).map((e) => [e.step, e.seg.recompute]),
    [[234, 62], [235, 2]]);
  const token = a.tokens.find((k) => k.steps.includes(206));
  assert.equal(token.cause, "preempted");
  assert.equal(token.step, 235);
  assert.ok(token.slow);
  const lines = story(a).map((l) => l.key);
  assert.ok(lines.includes("autopsy.story_preempted") && lines.includes("autopsy.story_waited_again")
    && lines.includes("autopsy.story_recompute") && lines.at(-1) === "autopsy.story_finished", lines.join());
});

test("chunked prefill: r2's 414-token prompt in chunks, each a story line with its rows", () => {
  const a = autopsy(fullBook(), "r2");
  const chunks = a.entries.filter((e) => e.seg && e.seg.kind !== "decode");
  assert.ok(chunks.length > 2);
  assert.equal(chunks.reduce((n, e) => n + e.seg.rows, 0) + chunks[0].seg.cached, 414);
  assert.equal(chunks[0].hit.tokens, 16);
  const lines = story(a).filter((l) => l.key.startsWith("autopsy.story_chunk"));
  assert.deepEqual(lines.map((l) => l.vars.rows), chunks.map((e) => e.seg.rows));
  assert.ok(a.ttft.parts.others > 0 && a.ttft.parts.prefill > 0);
});

test("ITL: a token whose step also carried another request's prefill chunk names that chunk as the cause", () => {
  const { records } = loadTrace();
  const book = fullBook();
  const sampledAt = (r, rid) => r && r.segments.some((s) => s.request_id === rid && s.sampled);
  const named = [];
  records.forEach((r, i) => {
    for (const own of r.segments.filter((s) => s.kind === "decode" && s.sampled && sampledAt(records[i - 1], s.request_id))) {
      const [top, next] = r.segments.filter((s) => s !== own).sort((p, q) => q.num_rows - p.num_rows);
      if (!top || top.kind !== "prefill_chunk" || (next && next.num_rows === top.num_rows)) continue;
      const token = autopsy(book, own.request_id).tokens.find((k) => k.step === r.step);
      assert.deepEqual([token.cause, token.by], ["shared",
        { step: r.step, rid: top.request_id, kind: "prefill_chunk", rows: top.num_rows, stepRows: r.num_rows }]);
      const why = plainText(tokenWhy(token, t("en")));
      assert.ok(why.endsWith(`step ${r.step} also carried ${top.request_id}'s ${top.num_rows}-row prefill chunk ` +
        `(${r.num_rows} rows in all)`), why);
      named.push([own.request_id, r.step, top.request_id, top.num_rows]);
    }
  });
  // r0's tokens while r2's 414-token prompt went in 62-row chunks beside it
  assert.deepEqual(named.filter(([rid]) => rid === "r0").slice(0, 3), [["r0", 2, "r2", 62], ["r0", 3, "r2", 62], ["r0", 4, "r2", 62]]);
  assert.ok(named.length >= 8, JSON.stringify(named));
});

test("a page that connected late: the lane says which steps it never saw, the parts still add up", () => {
  const { records } = loadTrace();
  const cut = records[100].step, from = cut - 39;
  const book = new LaneBook();
  book.apply({ type: "snapshot", requests: [...arrivals()].map(([rid, t]) => ({ request_id: rid, arrival: t })),
    records: records.filter((r) => r.step >= from && r.step <= cut) });
  book.apply({ type: "frame", events: [], records: records.filter((r) => r.step > cut) });
  const full = fullBook();
  const older = [...arrivals().keys()].filter((rid) => autopsy(full, rid).first < from && autopsy(full, rid).last >= from);
  assert.ok(older.length >= 1);
  for (const rid of older) {
    const late = autopsy(book, rid);
    assert.equal(late.startKnown, false, rid);
    assert.equal(late.first, from, rid);
    assert.equal(story(late)[0].key, "autopsy.story_unseen_start");
    const whole = autopsy(full, rid);
    if (whole.ttft.step < from) {  // its first token came before the page connected
      assert.deepEqual([late.ttft.done, late.ttft.unseen], [false, true], rid);
      assert.deepEqual(late.tokens.map((k) => k.index), whole.tokens.filter((k) => k.step > from).map((k) => k.index));
    } else {
      close(sum(late.ttft.parts), late.ttft.total, `${rid} parts`);
      close(late.ttft.total, whole.ttft.total, `${rid} TTFT`);
      assert.ok(late.ttft.parts.unknown > 0, rid);
    }
  }
  const known = autopsy(book, "r9");  // arrived at step 84, after the page connected
  assert.equal(known.startKnown, true);
  close(known.ttft.total, autopsy(full, "r9").ttft.total, "r9 TTFT");
});

test("frames lost in the middle show as unseen steps and unknown time", () => {
  const { records } = loadTrace();
  const book = new LaneBook();
  book.apply({ type: "snapshot", requests: [...arrivals()].map(([rid, t]) => ({ request_id: rid, arrival: t })), records: [] });
  book.apply({ type: "frame", events: [], records: records.filter((r) => r.step < 3 || r.step > 5) });
  const a = autopsy(book, "r2");
  assert.deepEqual(a.missing, [[3, 5]]);
  assert.ok(a.ttft.parts.unknown > 0);
  close(sum(a.ttft.parts), a.ttft.total, "r2 parts");
  assert.ok(story(a).some((l) => l.key === "autopsy.story_unseen" && l.vars.from === 3 && l.vars.to === 5));
  const ended = new LaneBook();  // r0 finishes at step 47, in a hole of steps 40-50
  ended.apply({ type: "frame", events: [], records: records.filter((r) => r.step < 40 || r.step > 50) });
  const r0 = autopsy(ended, "r0");
  assert.deepEqual([r0.finish, r0.endedUnseen, r0.missing, r0.last], [null, true, [[40, 50]], 50]);
  assert.equal(r0.steps.at(-1).state, "unknown");
});

test("a replay seeking back changes nothing; the same step with another start is another run", () => {
  const { records } = loadTrace();
  const book = fullBook();
  const before = JSON.stringify(autopsy(book, "r0"));
  book.apply({ type: "snapshot", requests: [], records: records.slice(10, 50) });
  assert.equal(JSON.stringify(autopsy(book, "r0")), before);
  assert.equal(autopsy(book, "r0", 20).last, 20);
  book.apply({ type: "frame", events: [], records: [{ ...records[0], t_start: records[0].t_start + 1 }] });
  assert.equal(book.lanes.size, 1);
});

test("lanes stay bounded: finished ones are forgotten first", () => {
  const book = new LaneBook();
  const requests = {};
  for (let i = 0; i < MAX_LANES + 20; i++) requests[`q${i}`] = { status: i < 30 ? "finished" : "waiting", num_prompt_tokens: 3, num_computed_tokens: 0, num_output_tokens: 0, prefill_target: 3 };
  const finished = Object.fromEntries(Object.keys(requests).slice(0, 30).map((rid) => [rid, "stop"]));
  book.apply({ type: "frame", events: [], records: [{ step: 0, t_start: 1, t_end: 2, num_rows: 0, token_budget: 8,
    segments: [], requests, finished, admitted: {}, preempted: [], block_tables: {}, kv: { block_size: 16 } }] });
  assert.equal(book.lanes.size, MAX_LANES);
  assert.ok(!book.lanes.has("q0") && book.lanes.has("q29") && book.lanes.has(`q${MAX_LANES + 19}`));
});

test("autopsy colours: one fixed palette per phase and cause, the same for every request", async () => {
  const { stateStyle, CAUSE_COLORS, AUTOPSY_COLORS } = await import("../../assets/js/autopsy_figures.js");
  const states = ["waiting", "prefill", "decode", "recompute", "stalled", "preempted", "unknown"];
  const looks = states.map((s) => JSON.stringify(stateStyle(s)));
  assert.equal(new Set(looks).size, states.length, looks.join("\n"));
  const owns = [stateStyle("prefill").color, stateStyle("decode").color];
  assert.ok(!owns.includes(AUTOPSY_COLORS.others) && owns[0] !== owns[1], "own rows vs serving others");
  const causes = Object.values(CAUSE_COLORS);
  assert.ok(causes.every(Boolean) && new Set(causes).size === causes.length, JSON.stringify(CAUSE_COLORS));
});
