// Looking back while the engine is paused (the stage layout's ← and →, stage_keys.js): the views
// show the history as it stood at an earlier step instead of the newest. ``state.until`` is the
// step of the record they show as this step, or null for live; the reducer drops it when a new
// record arrives (state.js), so new live steps bring the newest back. ← and → move between the
// steps that ran work (the ones the views show as "this step", shown_step.js). Pure.
import { shownStep } from "./shown_step.js";

// The records the views draw and the step they show as this one.
export function viewedHistory(state) {
  if (state.until == null) return { records: state.records, shown: state.shown };
  const records = state.records.filter((r) => r.step <= state.until);
  return { records, shown: shownStep(records) };
}

// ←: the last step with work before the one shown; ``until`` as it is when there is none.
export function earlierStep(state) {
  const shown = viewedHistory(state).shown.record;
  const before = shown ? state.records.filter((r) => r.num_rows > 0 && r.step < shown.step) : [];
  return before.length ? before[before.length - 1].step : state.until;
}

// → while looking back: the next step with work; null (live) at the newest one.
export function laterStep(state) {
  if (state.until == null) return null;
  const next = state.records.find((r) => r.num_rows > 0 && r.step > state.until);
  const newest = state.shown.record;
  return next && newest && next.step < newest.step ? next.step : null;
}
