// Lane digests: the request autopsy's memory of every request, kept beyond the page's 40
// latest records.
//
// Design note. The page keeps only the latest HISTORY records (state.js), but a request may
// live for hundreds of steps, and its autopsy needs all of them. So every record the page sees
// is folded, when it arrives, into one compact lane per request: one entry per step in which
// the request was present (its status, its segment, the step's other rows), plus its arrival,
// its prefix-cache hits, its preemptions (blocks freed, computed tokens lost) and its finish.
// Only records and events are read, never engine state, so any record source (a live engine,
// a replay, a vLLM engine, a trace in the exported report) gets the same lanes.
// Bounded like the request state: at most MAX_LANES lanes (finished ones evicted first, oldest
// first) of at most MAX_ENTRIES entries each (the oldest dropped first, and then known lost).
// Steps the page never saw (it connected late, a replay seeked ahead, frames were dropped) are
// absent and the autopsy names them unknown rather than guess. Entries are facts about a step:
// a record seen again (a replay seeking back and playing on) changes nothing, while a record of
// a step already seen with another start time is another run (the server restarted), and then
// every lane is forgotten.

export const MAX_LANES = 256;
export const MAX_ENTRIES = 4096;
export const MAX_STEPS = 20000;  // steps remembered as seen (their times)
const OTHERS_KEPT = 3;  // the largest other segments of a step kept per entry

export class LaneBook {
  constructor() {
    this.lanes = new Map();
    this.steps = new Map();  // step -> {t0, t1} of every record folded in
  }

  // One protocol message (hub.py): arrivals from events or the snapshot's book, and records.
  apply(message) {
    if (message.type === "snapshot") {
      for (const entry of message.requests || []) this.arrival(entry.request_id, entry.arrival, false);
    } else if (message.type === "frame") {
      for (const event of message.events || []) {
        if (event.kind === "arrival") this.arrival(event.request_id, event.time, true);
      }
    } else {
      return;
    }
    for (const record of message.records || []) this.add(record);
  }

  // ``live``: the page saw the arrival happen (not from a snapshot), so it saw the steps since.
  arrival(rid, time, live) {
    if (time == null) return;
    const lane = this.laneOf(rid);
    if (lane.arrival == null || live) lane.arrival = time;
    lane.arrivalLive = lane.arrivalLive || live;
  }

  add(record) {
    const known = this.steps.get(record.step);
    if (known && known.t0 === record.t_start) return;  // seen already
    if (known) this.clear();  // the same step again with another start: another run
    this.steps.set(record.step, { t0: record.t_start, t1: record.t_end });
    for (const step of this.steps.keys()) { if (this.steps.size <= MAX_STEPS) break; this.steps.delete(step); }
    for (const rid of present(record)) this.addEntry(this.laneOf(rid), record);
    this.evict();
  }

  clear() {
    this.lanes.clear();
    this.steps.clear();
  }

  seen(step) { return this.steps.has(step); }

  lane(rid) { return this.lanes.get(rid) || null; }

  laneOf(rid) {
    let lane = this.lanes.get(rid);
    if (!lane) {
      lane = { rid, arrival: null, arrivalLive: false, entries: [], dropped: 0, blockSize: null,
        lastBlocks: null, lastComputed: 0, lost: 0, finished: null };
      this.lanes.set(rid, lane);
    }
    return lane;
  }

  addEntry(lane, record) {
    const entry = entryOf(lane, record);
    const entries = lane.entries;
    let at = entries.length;
    while (at > 0 && entries[at - 1].step > entry.step) at -= 1;  // a replay filling in older steps
    entries.splice(at, 0, entry);
    if (entries.length > MAX_ENTRIES) { entries.shift(); lane.dropped += 1; }
    if (record.finished && record.finished[lane.rid] !== undefined) {
      lane.finished = { step: record.step, reason: record.finished[lane.rid] };
    }
  }

  evict() {
    let excess = this.lanes.size - MAX_LANES;
    if (excess <= 0) return;
    const lanes = [...this.lanes.values()];
    const order = [...lanes.filter((l) => l.finished), ...lanes];
    for (const lane of order) {
      if (excess <= 0) break;
      if (this.lanes.delete(lane.rid)) excess -= 1;
    }
  }
}

// The requests a record speaks of: its live and just-finished requests and its segments.
function present(record) {
  const ids = new Set(Object.keys(record.requests || {}));
  for (const s of record.segments) ids.add(s.request_id);
  for (const rid of record.preempted || []) ids.add(rid);
  return ids;
}

// What one step was for one request. Keeps the lane's running facts (blocks held, computed
// tokens, tokens lost to a preemption and not yet recomputed) up to date.
function entryOf(lane, record) {
  const rid = lane.rid, info = (record.requests || {})[rid];
  const segment = record.segments.find((s) => s.request_id === rid) || null;
  lane.blockSize = (record.kv && record.kv.block_size) || lane.blockSize;
  const entry = { step: record.step, t0: record.t_start, t1: record.t_end, status: info ? info.status : null,
    stepRows: record.num_rows, budget: record.token_budget, policy: record.policy,
    segments: record.segments.length, seg: null, others: others(record, rid) };
  if ((record.preempted || []).includes(rid)) {
    entry.preempted = { blocks: lane.lastBlocks, lost: lane.lastComputed };
    lane.lost = Math.max(lane.lost, lane.lastComputed);  // preempted again while recomputing
    lane.lastBlocks = 0;
  }
  const hit = (record.admitted || {})[rid];
  if (hit !== undefined) entry.hit = admission(record, rid, hit, lane.blockSize);
  if (segment) entry.seg = segmentOf(lane, segment, record);
  if (info) lane.lastComputed = info.num_computed_tokens;
  if (info) Object.assign(entry, { prompt: info.num_prompt_tokens, outputs: info.num_output_tokens });
  if (record.finished && record.finished[rid] !== undefined) entry.finished = record.finished[rid];
  return entry;
}

function segmentOf(lane, s, record) {
  const recompute = Math.max(0, Math.min(s.num_keys, lane.lost) - s.num_cached);
  if (s.num_keys >= lane.lost) lane.lost = 0;
  const table = (record.block_tables || {})[lane.rid];
  if (table) lane.lastBlocks = table.length;
  return { kind: s.kind, rows: s.num_rows, cached: s.num_cached, keys: s.num_keys, sampled: !!s.sampled,
    recompute: Math.min(recompute, s.num_rows) };
}

function admission(record, rid, tokens, blockSize) {
  const table = (record.block_tables || {})[rid] || [];
  const count = blockSize ? Math.floor(tokens / blockSize) : 0;
  return { tokens, blocks: table.slice(0, count) };
}

// The largest other segments of the step (who shared it), and all their rows.
function others(record, rid) {
  const rest = record.segments.filter((s) => s.request_id !== rid);
  const top = [...rest].sort((a, b) => b.num_rows - a.num_rows).slice(0, OTHERS_KEPT)
    .map((s) => ({ rid: s.request_id, kind: s.kind, rows: s.num_rows }));
  return { top, rows: rest.reduce((sum, s) => sum + s.num_rows, 0),
    prefillRows: rest.filter((s) => s.kind !== "decode").reduce((sum, s) => sum + s.num_rows, 0) };
}
