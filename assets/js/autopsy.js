// Request autopsy: one request's life read from its lane (lanes.js): its steps, its prefill
// chunks, prefix-cache hits and preemptions, its time to first token split into parts, and the
// latency before each later token with the steps that caused it. Pure (tested in node).
//
// Design note: the TTFT parts are a partition of [arrival, first token], so they add up to the
// TTFT exactly. The first token is the end of the step that sampled it (the records' clock);
// the arrival is the request's arrival event. Every instant between the two is given to one part:
//   queue      before the first step that gave the request rows: waiting to be admitted (steps
//              of others ran meanwhile, or the engine was paused or idle);
//   prefill    the request's own share of the steps that computed its prompt: a step's time is
//              split by rows, so a step of 100 rows of which 62 were its own gives it 62%;
//   others     after admission, the other requests' share of the steps it was in, and the whole
//              of steps it was in but got no rows (the budget or the policy served others first);
//   preempted  after a preemption, until it is scheduled again, and its own share of the steps
//              that recompute the tokens the preemption threw away;
//   idle       after admission, the time between steps (the engine's own overhead, a pause, slow
//              motion);
//   unknown    time in steps the page never saw (it connected later, frames were lost).
// The same rules split each later token's latency (its ITL) into the step(s) it spans.

export const TTFT_PARTS = ["queue", "prefill", "others", "preempted", "idle", "unknown"];
export const LANE_STATES = ["waiting", "prefill", "recompute", "decode", "stalled", "preempted", "unknown"];
export const CAUSES = ["normal", "shared", "stalled", "preempted", "idle", "unknown"];
const SLOW = 1.5;  // a token is slowed when its ITL exceeds this many times the request's median

// ``book``: a LaneBook; ``until``: the last step to show (a replay paused at an earlier step).
export function autopsy(book, rid, until = Infinity) {
  const lane = book.lane(rid);
  const entries = lane ? lane.entries.filter((e) => e.step <= until) : [];
  if (!entries.length) return null;
  const first = entries[0], last = entries[entries.length - 1];
  const startKnown = lane.dropped === 0 && (lane.arrivalLive || book.seen(first.step - 1) || first.step === 0);
  const finish = lane.finished && lane.finished.step <= until ? lane.finished : null;
  const missing = missingSteps(entries);
  const next = finish ? null : nextSeen(book, last.step, until);
  const endedUnseen = next !== null && next > last.step + 1;
  if (endedUnseen) missing.push([last.step + 1, next - 1]);  // it ended in steps the page did not see
  const sampled = entries.filter((e) => e.seg && e.seg.sampled).map((e, i) => ({ entry: e, index: tokenIndex(e, i) }));
  return { rid, arrival: lane.arrival ?? first.t0, arrivalKnown: lane.arrival != null, startKnown,
    first: first.step, last: endedUnseen ? next - 1 : last.step, entries, steps: lifeSteps(entries, missing), missing,
    endedUnseen, dropped: lane.dropped, finish, ttft: ttftOf(lane, entries, sampled, startKnown, endedUnseen),
    tokens: tokenLatencies(sampled, entries), prompt: last.prompt ?? first.prompt ?? null,
    outputs: last.outputs ?? sampled.length };
}

// The TTFT and its parts; "so far" while no token came, "unseen" when the first one came in
// steps the page did not see.
function ttftOf(lane, entries, sampled, startKnown, endedUnseen) {
  const arrival = lane.arrival ?? entries[0].t0;
  const firstToken = sampled.length && sampled[0].index === 0 ? sampled[0].entry : null;
  const end = firstToken ? firstToken.t1 : entries[entries.length - 1].t1;
  return { done: !!firstToken, unseen: !firstToken && (sampled.length > 0 || endedUnseen),
    step: firstToken ? firstToken.step : null, total: end - arrival, lowerBound: lane.arrival == null,
    parts: ttftParts(entries, arrival, end, startKnown) };
}

// The 0-based index of the token an entry sampled: from the record's output count when it has
// one (a page that connected late sees later tokens first), else its place among those seen.
function tokenIndex(entry, seen) {
  return entry.outputs != null ? entry.outputs - 1 : seen;
}

// The first step after ``step`` (up to ``until``) the page saw, or null.
function nextSeen(book, step, until) {
  let next = null;
  for (const s of book.steps.keys()) if (s > step && s <= until && (next === null || s < next)) next = s;
  return next;
}

// Runs of steps inside the request's life that the page never saw: [[from, to], ...].
export function missingSteps(entries) {
  const runs = [];
  for (let i = 1; i < entries.length; i++) {
    if (entries[i].step > entries[i - 1].step + 1) runs.push([entries[i - 1].step + 1, entries[i].step - 1]);
  }
  return runs;
}

// Every step of the life as {step, state, entry}: its state (LANE_STATES) at that step;
// steps the page never saw are "unknown" (entry null).
export function lifeSteps(entries, missing = []) {
  const out = [];
  let phase = "queue", prev = null;
  for (const e of entries) {
    if (prev) for (let s = prev.step + 1; s < e.step; s++) out.push({ step: s, state: "unknown", entry: null });
    phase = phaseAfter(phase, e);
    out.push({ step: e.step, state: stateAt(e, phase), entry: e });
    prev = e;
  }
  const tail = missing.length && prev && missing[missing.length - 1][0] > prev.step ? missing[missing.length - 1] : null;
  if (tail) for (let s = tail[0]; s <= tail[1]; s++) out.push({ step: s, state: "unknown", entry: null });
  return out;
}

function stateAt(entry, phase) {
  if (entry.seg) return entry.seg.kind === "decode" ? "decode" : entry.seg.recompute ? "recompute" : "prefill";
  return { queue: "waiting", preempted: "preempted", running: "stalled" }[phase];
}

// The request's phase as the steps go by: "queue" until its first rows, "preempted" from a
// preemption until its next rows, "running" otherwise. A record's status says it outright (a
// page that connected late did not see how it got there); without one it is inferred.
const PHASE_OF_STATUS = { waiting: "queue", preempted: "preempted", prefilling: "running", decoding: "running" };

function phaseAfter(phase, entry) {
  if (entry.seg) return "running";
  if (entry.preempted) return "preempted";
  return PHASE_OF_STATUS[entry.status] || phase;
}

const GAP_PART = { queue: "queue", preempted: "preempted", running: "idle" };
const STEP_PART = { queue: "queue", preempted: "preempted", running: "others" };

// The partition of [start, end] described at the top.
export function ttftParts(entries, start, end, startKnown) {
  const parts = Object.fromEntries(TTFT_PARTS.map((k) => [k, 0]));
  const add = (key, from, to) => {
    const d = Math.min(to, end) - Math.max(from, start);
    if (d > 0) parts[key] += d;
  };
  let phase = "queue", prev = null;
  for (const e of entries) {
    if (e.t0 >= end) break;
    const gap = prev ? (e.step === prev.step + 1 ? GAP_PART[phase] : "unknown") : startKnown ? "queue" : "unknown";
    add(gap, prev ? prev.t1 : start, e.t0);
    phase = phaseAfter(phase, e);
    if (e.seg) splitStep(e, add);
    else add(STEP_PART[phase], e.t0, e.t1);
    prev = e;
  }
  if (prev) add("unknown", prev.t1, end);  // the first token's step is always seen: nothing here
  return parts;
}

// A step that gave the request rows: its share by rows (recomputed rows: lost to preemption).
function splitStep(e, add) {
  const own = e.seg.rows / Math.max(1, e.stepRows), redo = e.seg.recompute / Math.max(1, e.seg.rows);
  const d = e.t1 - e.t0, ownEnd = e.t0 + d * own, redoEnd = e.t0 + d * own * redo;
  add("preempted", e.t0, redoEnd);
  add("prefill", redoEnd, ownEnd);
  add("others", ownEnd, e.t1);
}

// Each token after the first: its inter-token latency, the steps it spans and why it was slow.
export function tokenLatencies(sampled, entries) {
  const tokens = [];
  for (let i = 1; i < sampled.length; i++) {
    const prev = sampled[i - 1].entry, e = sampled[i].entry;
    if (sampled[i].index !== sampled[i - 1].index + 1) continue;  // tokens in between were not seen
    const span = entries.filter((x) => x.step > prev.step && x.step <= e.step);
    const itl = e.t1 - prev.t1, inSteps = span.reduce((sum, x) => sum + (x.t1 - x.t0), 0);
    const missing = e.step - prev.step - span.length;
    tokens.push({ index: sampled[i].index, step: e.step, t: e.t1, itl, inSteps, between: itl - inSteps,
      steps: span.map((x) => x.step), missing, ...cause(span, itl, inSteps, missing) });
  }
  const median = medianOf(tokens.map((k) => k.itl));
  for (const k of tokens) k.slow = k.cause !== "normal" && k.itl > SLOW * median;
  return tokens;
}

// Why a token took as long as it did, with the step and the other request's segment to blame.
function cause(span, itl, inSteps, missing) {
  const last = span[span.length - 1];
  if (missing > 0) return { cause: "unknown", by: null };
  const preempted = span.find((e) => e.preempted);
  if (preempted) return { cause: "preempted", by: { step: preempted.step, ...preempted.preempted } };
  const stalled = span.filter((e) => !e.seg);
  if (stalled.length) return { cause: "stalled", by: blame(stalled), stalled: stalled.length };
  if (itl - inSteps > inSteps) return { cause: "idle", by: null };
  if (last.others.prefillRows > last.seg.rows) return { cause: "shared", by: blame([last]) };
  return { cause: "normal", by: null };
}

// The largest segment of another request in these steps: {step, rid, kind, rows, stepRows}.
function blame(steps) {
  let best = null;
  for (const e of steps) {
    const top = e.others.top[0];
    if (top && (!best || top.rows > best.rows)) best = { step: e.step, ...top, stepRows: e.stepRows };
  }
  return best;
}

export function medianOf(values) {
  if (!values.length) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

// Milliseconds that add up: each part rounded so that the rounded parts sum to the rounded
// total (largest remainders get the spare units), so the numbers on screen add up too.
export function roundedParts(parts, total) {
  const keys = Object.keys(parts);
  const exact = keys.map((k) => parts[k] * 1000), floors = exact.map(Math.floor);
  let spare = Math.round(total * 1000) - floors.reduce((a, b) => a + b, 0);
  const order = keys.map((_, i) => i).sort((a, b) => (exact[b] - floors[b]) - (exact[a] - floors[a]));
  for (const i of order) { if (spare <= 0) break; floors[i] += 1; spare -= 1; }
  return Object.fromEntries(keys.map((k, i) => [k, floors[i]]));
}
