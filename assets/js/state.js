// The dashboard's state as a pure function of the messages received (protocol v2, viz/hub.py):
// reduce(state, message) returns a new state and never changes the one it was given.
//
// Bounded like the server: at most MAX_REQUESTS request entries (finished ones evicted first,
// oldest first, as the server's RequestBook) and the HISTORY latest records. ``shown`` is the
// step the views show as the current one (shown_step.js: the latest that ran work, and the
// empty steps since), kept even when it leaves the history. ``dirty`` says what
// changed since the page last drew: ``views`` (the figures) and ``cards`` (the request ids whose
// text card changed). A record marks a card dirty only when it changed that request's state.
// Local messages, not from the server: {type: "drawn"} (the page drew: nothing is dirty) and
// {type: "redraw"} (size or language changed: everything is). ``until`` is the step the views
// look back at while the engine is paused ({type: "look", until}: look_back.js), null for
// live; a new record brings the views back to the newest.

import { followStep, NOTHING_SHOWN } from "./shown_step.js";

export const HISTORY = 40;
export const MAX_REQUESTS = 256;

export function initialState() {
  return { viewer: null, meta: null, status: null, requests: new Map(), records: [], shown: NOTHING_SHOWN, until: null,
    dirty: { views: false, cards: new Set(), all: false } };
}

export function reduce(state, message) {
  switch (message.type) {
    case "snapshot": return snapshot(state, message);
    case "frame": return frame(state, message);
    case "drawn": return { ...state, dirty: { views: false, cards: new Set(), all: false } };
    case "redraw": return { ...state, dirty: { ...state.dirty, views: true, all: true } };
    case "look": return { ...state, until: message.until, dirty: { ...state.dirty, views: true } };
    case "ping": return state;
    default: return message.status ? { ...state, status: message.status } : state;
  }
}

function snapshot(state, message) {
  const requests = new Map();
  for (const entry of message.requests || []) requests.set(entry.request_id, fromBook(entry));
  const next = { viewer: message.viewer ?? state.viewer, meta: message.meta ?? state.meta,
    status: message.status ?? state.status, requests, records: [], shown: NOTHING_SHOWN, until: null,
    dirty: { views: true, cards: new Set(), all: true } };
  addRecords(next, message.records || []);
  return next;
}

function frame(state, message) {
  const next = { ...state, status: message.status ?? state.status,
    requests: new Map(state.requests), records: [...state.records],
    dirty: { ...state.dirty, cards: new Set(state.dirty.cards) } };
  for (const event of message.events || []) applyEvent(next, event);
  addRecords(next, message.records || []);
  return next;
}

// A RequestBook entry (snapshot): "pending" until its arrival, then "waiting" until a record
// says otherwise.
function fromBook(entry) {
  const status = entry.finished ? "finished" : entry.arrival == null ? "pending" : "waiting";
  return { text: "", num_output_tokens: 0, visible: false, mine: false, progress: null, ...entry, status };
}

function newEntry(rid) {
  return { request_id: rid, color: null, label: null, prompt: null, num_prompt_tokens: 0,
    text: "", num_output_tokens: 0, arrival: null, first_token: null, last_token: null,
    finished: false, finish_reason: null, error: null, visible: false, mine: false,
    status: "pending", progress: null };
}

// The helpers below change the new state being built (its own copies of ``requests``,
// ``records`` and ``dirty``), never the state reduce() was given.
function update(state, rid, change) {
  const entry = state.requests.get(rid) || newEntry(rid);
  state.requests.set(rid, { ...entry, ...change(entry) });  // a Map keeps first-seen order
  state.dirty.cards.add(rid);
}

function applyEvent(state, e) {
  update(state, e.request_id, (entry) => {
    const common = { color: e.color ?? entry.color, visible: !!e.visible, mine: !!e.mine,
      label: e.label ?? entry.label };
    // pending (a new entry's state) until its arrival; a later ``fired`` says its place in the
    // page's turns (viz/ui/fair_queue.py)
    if (e.kind === "fired") return { ...common, queue: e.queue ?? entry.queue ?? null };
    if (e.kind === "arrival") {
      return { ...common, arrival: e.time, prompt: e.prompt ?? null,
        num_prompt_tokens: e.num_prompt_tokens || 0,
        status: entry.status === "pending" ? "waiting" : entry.status };
    }
    return { ...common, ...delta(entry, e) };
  });
}

function delta(entry, e) {
  const out = {};
  if (e.text && e.offset + e.text.length > entry.text.length) {
    out.text = entry.text.slice(0, e.offset) + e.text;
  }
  const n = (e.token_ids || []).length;
  if (n) {
    out.num_output_tokens = Math.max(entry.num_output_tokens, e.token_offset + n);
    out.first_token = entry.first_token && entry.first_token < e.time ? entry.first_token : e.time;
    out.last_token = entry.last_token && entry.last_token > e.time ? entry.last_token : e.time;
  }
  if (e.finished) {
    Object.assign(out, { finished: true, finish_reason: e.finish_reason ?? null,
      error: e.error ?? null, status: "finished" });
  }
  return out;
}

function addRecords(state, records) {
  let last = state.records.length ? state.records[state.records.length - 1].step : -Infinity;
  for (const record of records) {
    if (record.step <= last) continue;
    last = record.step;
    state.records.push(record);
    state.shown = followStep(state.shown, record);
    state.until = null;
    state.dirty.views = true;
    for (const [rid, info] of Object.entries(record.requests || {})) applyProgress(state, rid, info, record);
    for (const rid of [...Object.keys(record.finished || {}), ...(record.aborted || [])]) endedBy(state, rid, record);
  }
  state.records.splice(0, Math.max(0, state.records.length - HISTORY));
  evict(state);
}

// One request's state in a record; the card changes only if what it shows changed.
function applyProgress(state, rid, info, record) {
  const entry = state.requests.get(rid);
  const status = entry && entry.finished ? "finished" : info.status;
  if (entry && entry.status === status && sameProgress(entry.progress, info)) return;
  update(state, rid, (old) => ({ status, progress: { ...info },
    finish_reason: old.finish_reason ?? (record.finished || {})[rid] ?? null }));
}

// A request the record finished or aborted: finished for good, as the server's reducer has it
// (engine/request_states.py), even before its last delta arrives.
function endedBy(state, rid, record) {
  const entry = state.requests.get(rid);
  if (entry && entry.finished) return;
  update(state, rid, (old) => ({ finished: true, status: "finished",
    finish_reason: old.finish_reason ?? (record.finished || {})[rid] ?? "abort" }));
}

function sameProgress(a, b) {
  return !!a && a.num_computed_tokens === b.num_computed_tokens && a.prefill_target === b.prefill_target
    && a.num_output_tokens === b.num_output_tokens && a.num_prompt_tokens === b.num_prompt_tokens;
}

function evict(state) {
  let excess = state.requests.size - MAX_REQUESTS;
  if (excess <= 0) return;
  const finished = [...state.requests.values()].filter((e) => e.status === "finished");
  const order = [...finished, ...state.requests.values()].map((e) => e.request_id);
  for (const rid of order) {
    if (excess <= 0) break;
    if (state.requests.delete(rid)) { excess -= 1; state.dirty.cards.add(rid); }
  }
}
