// The compare's own figures, pure builders (run, view, cursor) -> {data, layout}: every running
// decoder's inter-token latency over time (stalled tokens ringed in red) and each request's
// time to first token. Both sides share their axes' ranges (``scale``), so their heights compare;
// what happens after the cursor is drawn faint. The token layout is the live view's own builder.
import { CAUSE_COLORS } from "./autopsy_figures.js";
import { axis, baseLayout, colorOf, esc, THEME } from "./figures/common.js";

const MARGIN = { l: 56, r: 14, t: 8, b: 40 };
const FAINT = 0.22;

// The ranges both sides share: the longest run and the largest ITL and TTFT.
export function sharedScale(runs) {
  const most = (values, least) => Math.max(least, ...values);
  return { seconds: most(runs.map((r) => r.duration), 0.001),
    itlMs: most(runs.flatMap((r) => r.itl.map((k) => k.s * 1000)), 1) * 1.08,
    ttftMs: most(runs.flatMap((r) => r.ttft.map((x) => x.s * 1000)), 1) * 1.08 };
}

export function itlOverTime(run, view, at, scale, why) {
  const t = view.t, past = run.itl.filter((k) => k.at <= at), future = run.itl.filter((k) => k.at > at);
  const trace = (tokens, opacity, role) => ({ type: "scatter", mode: "markers", x: tokens.map((k) => k.at),
    y: tokens.map((k) => k.s * 1000), opacity, meta: { role, rids: tokens.map((k) => k.rid), causes: tokens.map((k) => k.cause) },
    marker: { size: tokens.map((k) => (k.cause === "stalled" ? 11 : 7)), color: tokens.map((k) => colorOf(view, k.rid)),
      line: { width: tokens.map((k) => (k.cause === "stalled" ? 2.5 : 0)), color: CAUSE_COLORS.stalled } },
    customdata: tokens.map((k) => why(k)), hovertemplate: "%{customdata}<extra></extra>" });
  return { data: [trace(future, FAINT, "itl_later"), trace(past, 1, "itl")], layout: baseLayout(view, {
    margin: MARGIN,
    xaxis: axis({ range: [0, scale.seconds * 1.02], title: { text: esc(t.short("compare.itl_x")), standoff: 4, font: { size: 12 } } }),
    yaxis: axis({ range: [0, scale.itlMs], title: { text: esc(t.short("compare.ms")), font: { size: 12 } } }),
    shapes: [cursor(at)], meta: { side: run.label },
  }) };
}

export function ttftBars(run, view, at, scale, order) {
  const t = view.t, byRid = new Map(run.ttft.map((x) => [x.rid, x]));
  const rows = order.filter((rid) => byRid.has(rid)).map((rid) => byRid.get(rid));
  return { data: [{ type: "bar", orientation: "h", y: rows.map((x) => esc(x.rid)), x: rows.map((x) => x.s * 1000),
    marker: { color: rows.map((x) => colorOf(view, x.rid)), opacity: rows.map((x) => (x.at <= at ? 1 : FAINT)) },
    meta: { role: "ttft", rids: rows.map((x) => x.rid) }, text: rows.map((x) => `${Math.round(x.s * 1000)} ms`),
    textposition: "auto", textfont: { color: THEME.outline, size: 11 }, cliponaxis: false,
    hovertemplate: "%{y}: %{x:.0f} ms<extra></extra>" }], layout: baseLayout(view, {
    margin: { ...MARGIN, l: 64 }, uniformtext: { mode: "hide", minsize: 9 },
    xaxis: axis({ range: [0, scale.ttftMs], title: { text: esc(t.short("compare.ms")), standoff: 4, font: { size: 12 } } }),
    yaxis: axis({ type: "category", autorange: "reversed", tickfont: { size: 11 } }),
    meta: { side: run.label },
  }) };
}

function cursor(at) {
  return { type: "line", xref: "x", yref: "paper", x0: at, x1: at, y0: 0, y1: 1, line: { color: THEME.muted, width: 1, dash: "dot" } };
}
