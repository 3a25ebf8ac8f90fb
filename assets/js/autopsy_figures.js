// The autopsy's two figures, pure builders (autopsy, view) -> {data, layout} like the views':
// the request's lane (its state at every step, and its rows against the other requests' rows
// in the same step) and the latency before each later token, coloured by its cause. Their
// legends are the panel's (DOM text), so no Plotly text can run out of a figure.
import { LANE_STATES } from "./autopsy.js";
import { axis, baseLayout, esc, kindText, stepAxis, THEME } from "./figures/common.js";

// One meaning, one colour: "others" (time or rows that went to other requests) is the same
// amber in the lane, the TTFT parts and the token causes.
// One fixed colour per phase and cause, never the request's own: a yellow request's prefill must
// not look like "serving others" (the request's colour is in the panel's chip and title).
export const AUTOPSY_COLORS = { waiting: "#7f8aa3", prefill: "#20c997", decode: "#4c6ef5", others: THEME.accent,
  preempted: "#d6336c", idle: "#5b6b8c", unknown: "#2a303c", stalled: THEME.alarm };
const MARGIN = { l: 56, r: 16, t: 10, b: 40 };

// Colour and pattern of each lane state.
export function stateStyle(state) {
  const hatch = (bg) => ({ shape: "/", bgcolor: bg, fgcolor: "rgba(0,0,0,0.45)", fillmode: "overlay", size: 7, solidity: 0.25 });
  const c = AUTOPSY_COLORS;
  return { waiting: { color: c.waiting }, prefill: { color: c.prefill, pattern: hatch(c.prefill) }, decode: { color: c.decode },
    recompute: { color: c.preempted, pattern: hatch(c.preempted) }, stalled: { color: c.stalled },
    preempted: { color: c.preempted }, unknown: { color: c.unknown, pattern: { shape: "x", fgcolor: "#59627a", size: 6 } } }[state];
}

export function laneFigure(a, view) {
  const steps = a.steps, t = view.t;
  const plotWidth = view.size.width - MARGIN.l - MARGIN.r;
  const strip = LANE_STATES.map((state) => stateBars(state, steps.filter((s) => s.state === state), view))
    .filter((trace) => trace.x.length);
  const data = [...strip, ...rowBars(steps, view), marks(a, view)];
  return { data, layout: baseLayout(view, {
    barmode: "stack", margin: MARGIN, bargap: steps.length > 60 ? 0 : 0.1,
    xaxis: stepAxis(a.first, a.last, plotWidth, { anchor: "y2", title: { text: esc(t.short("autopsy.lane_x")), standoff: 4, font: { size: 12 } } }),
    yaxis: axis({ domain: [0.78, 1], range: [0, 1], showticklabels: false, showgrid: false, zeroline: false, fixedrange: true }),
    yaxis2: axis({ domain: [0, 0.66], title: { text: esc(t.short("autopsy.lane_rows")), font: { size: 12 } }, rangemode: "tozero",
      tickformat: "d", tick0: 0, dtick: wholeTicks(steps) }),
    meta: { rid: a.rid },
  }) };
}

// Whole-row ticks, about four of them.
function wholeTicks(steps) {
  const most = Math.max(1, ...steps.map((s) => (s.entry ? s.entry.stepRows : 0)));
  const raw = most / 4, unit = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  return Math.max(1, [1, 2, 5, 10].map((m) => m * unit).find((d) => d >= raw) || unit * 10);
}

function stateBars(state, steps, view) {
  return { type: "bar", x: steps.map((s) => s.step), y: steps.map(() => 1), base: steps.map(() => 0), width: 1,
    xaxis: "x", yaxis: "y", marker: { ...stateStyle(state), line: { width: 0 } }, name: state,
    meta: { role: "state", state }, customdata: steps.map((s) => stepHover(s, view)),
    hovertemplate: "%{customdata}<extra></extra>" };
}

function stepHover(s, view) {
  const t = view.t, head = `${esc(t("hover.step", { step: s.step }))} · ${esc(t(`autopsy.state_${s.state}`))}`;
  const e = s.entry;
  if (!e || !e.seg) return head;
  const seg = `${kindText(t, e.seg.kind)} · ${esc(t("autopsy.hover_rows", { rows: e.seg.rows, first: e.seg.cached, last: e.seg.keys - 1 }))}`;
  return `${head}<br>${seg}<br>${esc(t("autopsy.hover_step_rows", { rows: e.stepRows, others: e.others.rows }))}`;
}

// The request's rows and the others' rows at every step it was in.
function rowBars(steps, view) {
  const seen = steps.filter((s) => s.entry);
  const own = (prefill) => seen.filter((s) => s.entry.seg && (s.entry.seg.kind !== "decode") === prefill);
  const bar = (list, y, marker, role, key) => ({ type: "bar", x: list.map((s) => s.step), y: list.map(y), xaxis: "x", yaxis: "y2",
    marker: { ...marker, line: { width: 0 } }, meta: { role }, name: role,
    hovertemplate: `${esc(view.t("hover.step", { step: "%{x}" }))} · ${esc(view.t.short(key))} %{y}<extra></extra>` });
  return [bar(own(true), (s) => s.entry.seg.rows, stateStyle("prefill"), "own_prefill", "autopsy.own_rows"),
    bar(own(false), (s) => s.entry.seg.rows, stateStyle("decode"), "own_decode", "autopsy.own_rows"),
    bar(seen, (s) => s.entry.others.rows, { color: AUTOPSY_COLORS.others, opacity: 0.55 }, "others", "autopsy.other_rows")];
}

// First token, prefix-cache hits, preemptions and the finish, as markers on the strip.
function marks(a, view) {
  const t = view.t, x = [], symbols = [], text = [];
  const mark = (step, symbol, label) => { x.push(step); symbols.push(symbol); text.push(esc(label)); };
  for (const e of a.entries) {
    if (e.hit && e.hit.tokens) mark(e.step, "diamond", t("autopsy.mark_hit", { tokens: e.hit.tokens, n: e.hit.blocks.length }));
    if (e.preempted) mark(e.step, "x", t("autopsy.mark_preempted", { blocks: e.preempted.blocks ?? "?", lost: e.preempted.lost }));
  }
  if (a.ttft.done) mark(a.ttft.step, "star", t("autopsy.mark_first", { step: a.ttft.step }));
  if (a.finish) {
    const reason = t.has(`reason.${a.finish.reason}`) ? t.pair(`reason.${a.finish.reason}`) : a.finish.reason;
    mark(a.finish.step, "square", t("autopsy.mark_finish", { reason }));
  }
  return { type: "scatter", mode: "markers", x, y: x.map(() => 0.5), xaxis: "x", yaxis: "y", text,
    marker: { symbol: symbols, size: 11, color: "#ffffff", line: { color: THEME.outline, width: 1.5 } },
    meta: { role: "marks" }, hovertemplate: "%{text}<extra></extra>" };
}

export const CAUSE_COLORS = { normal: AUTOPSY_COLORS.decode, shared: AUTOPSY_COLORS.others, stalled: AUTOPSY_COLORS.stalled,
  preempted: AUTOPSY_COLORS.preempted, idle: AUTOPSY_COLORS.idle, unknown: AUTOPSY_COLORS.unknown };

// ITL of each token after the first, coloured by cause, with the request's median.
export function itlFigure(a, view, why) {
  const t = view.t, tokens = a.tokens;
  const ms = tokens.map((k) => k.itl * 1000);
  const median = ms.length ? [...ms].sort((p, q) => p - q)[Math.floor(ms.length / 2)] : 0;
  const data = [{ type: "bar", x: tokens.map((k) => k.index), y: ms, meta: { role: "itl", causes: tokens.map((k) => k.cause) },
    marker: { color: tokens.map((k) => CAUSE_COLORS[k.cause]), line: { width: 0 } },
    customdata: tokens.map((k) => why(k)), hovertemplate: "%{customdata}<extra></extra>" }];
  const plotWidth = view.size.width - MARGIN.l - MARGIN.r;
  const last = tokens.length ? tokens[tokens.length - 1].index : 1;
  return { data, layout: baseLayout(view, {
    margin: MARGIN, bargap: tokens.length > 60 ? 0 : 0.15,
    xaxis: stepAxis(tokens.length ? tokens[0].index : 1, last, plotWidth, { title: { text: esc(t.short("autopsy.itl_x")), standoff: 4, font: { size: 12 } } }),
    yaxis: axis({ title: { text: esc(t.short("autopsy.itl_y")), font: { size: 12 } }, rangemode: "tozero" }),
    shapes: ms.length ? [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: median, y1: median,
      line: { color: THEME.muted, width: 1, dash: "dash" } }] : [],
    meta: { rid: a.rid, median },
  }) };
}
