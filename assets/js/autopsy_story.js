// The autopsy's story: a request's life as short lines, one per thing that happened (waited,
// admitted with a prefix-cache hit, each prefill chunk, decoding, stalls, a preemption with its
// blocks and lost tokens, the first token, the finish), each {from, to, key, vars} for the
// strings table. Pure (tested in node).
import { escapeText } from "./text_fit.js";

const RUN_KEYS = { wait: "autopsy.story_waited", wait_again: "autopsy.story_waited_again",
  decode: "autopsy.story_decoding", stall: "autopsy.story_stalled", unseen: "autopsy.story_unseen" };

// The kind of line a step belongs to; runs of the same kind are one line, a chunk is its own.
function lineKind(state, decoding) {
  if (state === "stalled") return decoding ? "decode" : "stall";
  return { waiting: "wait", preempted: "wait_again", prefill: "chunk", recompute: "chunk", decode: "decode",
    unknown: "unseen" }[state];
}

export function story(a) {
  const lines = [opening(a)];
  const decodedAfter = a.ttft.done ? a.ttft.step : a.ttft.unseen ? -Infinity : Infinity;
  let run = null;
  for (const { step, state, entry } of a.steps) {
    if (entry && entry.preempted) { lines.push(preemptionLine(entry)); run = null; }
    if (entry && entry.hit) { lines.push(admissionLine(entry)); run = null; }
    const kind = lineKind(state, step > decodedAfter);
    if (kind === "chunk") { lines.push(chunkLine(entry)); run = null; } else if (run && run.kind === kind) grow(run, step, entry);
    else { run = runLine(kind, step, entry); lines.push(run); }
    if (step === a.ttft.step) { lines.push(point(step, "autopsy.story_first_token")); run = null; }
  }
  if (a.finish) lines.push(point(a.finish.step, "autopsy.story_finished", { reason: a.finish.reason }));
  return lines.map(({ kind, ...line }) => line);
}

function point(step, key, vars = {}) {
  return { from: step, to: step, key, vars: { step, ...vars } };
}

function opening(a) {
  if (!a.startKnown) return point(a.first, "autopsy.story_unseen_start");
  return point(a.first, "autopsy.story_arrived", { prompt: a.prompt ?? "?" });
}

function runLine(kind, step, entry) {
  const line = { kind, from: step, to: step, key: RUN_KEYS[kind], vars: { from: step, to: step, n: 1, tokens: 0, stalled: 0 } };
  count(line, entry);
  return line;
}

function grow(line, step, entry) {
  line.to = step;
  Object.assign(line.vars, { to: step, n: line.vars.n + 1 });
  count(line, entry);
}

function count(line, entry) {
  if (entry && entry.seg && entry.seg.sampled) line.vars.tokens += 1;
  if (entry && !entry.seg && line.kind === "decode") line.vars.stalled += 1;
}

function chunkLine(e) {
  const s = e.seg, top = e.others.top;
  const others = top.map((o) => `${o.rid} ${o.rows}`).join(" + ") + (e.segments - 1 > top.length ? " + …" : "");
  const key = s.recompute ? "autopsy.story_recompute" : e.others.rows ? "autopsy.story_chunk_shared" : "autopsy.story_chunk";
  return point(e.step, key, { kind: s.kind, rows: s.rows, first: s.cached, last: s.keys - 1, redo: s.recompute,
    others, step_rows: e.stepRows });
}

function admissionLine(e) {
  const { tokens, blocks } = e.hit;
  if (!tokens) return point(e.step, "autopsy.story_admitted");
  return point(e.step, "autopsy.story_admitted_hit", { tokens, n: blocks.length, blocks: blocks.join(", ") });
}

function preemptionLine(e) {
  return point(e.step, "autopsy.story_preempted", { blocks: e.preempted.blocks ?? "?", lost: e.preempted.lost });
}

// Why token k took as long as it did: "token 5: 412 ms (step 17) · step 17 also carried C's
// 100-row prefill (102 rows in all)", escaped for Plotly's hover.
export function tokenWhy(k, t) {
  const ms = Math.round(k.itl * 1000), by = k.by;
  const head = t("autopsy.token_head", { index: k.index, ms, step: k.step });
  const vars = by ? { ...by, kind: by.kind ? t.pair(`kind.${by.kind}`) : "", blocks: by.blocks ?? "?", n: k.stalled || 0 } : {};
  const detail = { shared: "autopsy.why_shared", stalled: "autopsy.why_stalled", preempted: "autopsy.why_preempted",
    idle: "autopsy.why_idle", unknown: "autopsy.why_unknown" }[k.cause];
  const text = detail ? `${head} · ${t(detail, { ...vars, between: Math.round(k.between * 1000) })}` : head;
  return escapeText(text);
}
