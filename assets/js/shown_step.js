// The step the views show as "this step": the latest record that ran work (num_rows > 0).
// vLLM also runs steps that schedule no tokens (right after requests finish, to tell its
// workers, and under async scheduling); such a step stays in the histories, where it means
// something, but never replaces the last step with work on screen, else the views go blank
// exactly when a run ends. ``empty`` counts the empty steps since that step, ``freed`` the
// blocks they freed in its KV pool (a data-parallel rank's empty step frees blocks of its own
// pool only). Pure: the reducer folds each record in once (state.shown) and every view reads it.

export const NOTHING_SHOWN = Object.freeze({ record: null, empty: 0, freed: 0 });

export function followStep(shown, record) {
  if (record.num_rows > 0) return { record, empty: 0, freed: 0 };
  const samePool = shown.record && rankOf(shown.record) === rankOf(record);
  const freed = samePool ? Math.max(0, record.kv.num_free - shown.record.kv.num_free) : shown.freed;
  return { record: shown.record, empty: shown.empty + 1, freed };
}

export function shownStep(records) {
  return records.reduce(followStep, NOTHING_SHOWN);
}

// The data-parallel rank that ran ``record``, or null for an engine with one rank. The ingest
// gives each rank's records their own step number (source.rank_step) when it merges ranks.
export function rankOf(record) {
  const source = record.source || {};
  return source.rank_step == null ? null : source.data_parallel_rank ?? null;
}
