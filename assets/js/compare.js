// Compare, computed: what the page shows of two runs of one arrival pattern, from each run's
// records and arrival events only (viz/compare/runner.py keeps nothing else). Per request
// its TTFT and every later token's latency with its cause come from the same lanes and
// autopsy as the request autopsy (one implementation), so a stall in the compare is the
// autopsy's "stalled". Pure (tested in node).
//
// The table: TTFT p50 and p99 over the requests; ITL p99 over every gap between two tokens of
// one request (the running decoders' inter-token latencies); decode stalls (a step in which a
// decoding request got no row, counted per request); steps; preemptions. Quantiles are nearest
// rank: the smallest value with at least q of the values at or below it.
// The two runs are synchronised on the time since each run's first arrival.
import { autopsy } from "./autopsy.js";
import { stalledIds } from "./figures/token_layout.js";
import { LaneBook } from "./lanes.js";

export const TABLE_ROWS = ["ttft_p50", "ttft_p99", "itl_p99", "stalls", "steps", "preemptions"];

export function quantile(values, q) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)];
}

// One side of a compare result, read: {label, config, t0, records, ttft, itl, duration, table}.
export function runOf(side) {
  const book = new LaneBook();
  book.apply({ type: "frame", events: side.arrivals, records: side.records });
  const records = side.records;
  const t0 = Math.min(...side.arrivals.map((a) => a.time), records.length ? records[0].t_start : Infinity);
  const autopsies = side.arrivals.map((a) => autopsy(book, a.request_id)).filter(Boolean);
  const ttft = autopsies.filter((a) => a.ttft.done)
    .map((a) => ({ rid: a.rid, s: a.ttft.total, at: a.arrival + a.ttft.total - t0 }));
  const itl = autopsies.flatMap((a) => a.tokens.map((k) => ({ ...k, rid: a.rid, at: k.t - t0, s: k.itl })));
  const table = { ttft_p50: quantile(ttft.map((x) => x.s), 0.5), ttft_p99: quantile(ttft.map((x) => x.s), 0.99),
    itl_p99: quantile(itl.map((x) => x.s), 0.99), stalls: records.reduce((n, r) => n + stalledIds(r).length, 0),
    steps: records.length, preemptions: records.reduce((n, r) => n + (r.preempted || []).length, 0) };
  const duration = records.length ? records[records.length - 1].t_end - t0 : 0;
  return { label: side.label, config: side.config, t0, records, ttft, itl, duration, table };
}

// The records of ``run`` that had ended ``at`` seconds after its first arrival.
export function visibleRecords(run, at) {
  let n = 0;
  while (n < run.records.length && run.records[n].t_end - run.t0 <= at + 1e-9) n += 1;
  return run.records.slice(0, n);
}

// Per row, the side with the lower value (the better one), or null on a tie.
export function better(runs) {
  return Object.fromEntries(TABLE_ROWS.map((row) => {
    const [a, b] = runs.map((r) => r.table[row]);
    return [row, a === null || b === null || a === b ? null : a < b ? runs[0].label : runs[1].label];
  }));
}
