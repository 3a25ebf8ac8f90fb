// 4. Timing: each step's phase times (the source's phases, colours from the server), rows per
// step against the rows a padded batch would need, and generated tokens per second.
import { axis, baseLayout, budgetLine, countAxis, countScale, emptyFigure, esc, grownBy, LINE_PX, linePx, stepAxis, textPx,
  THEME } from "./common.js";
import { fitParts, shorten, textWidth } from "../text_fit.js";

const SIDE = 56;  // px each side: y tick labels and a y title
const OTHER_COLOR = "#a6a6a6", PADDED_COLOR = "#ff6b6b";
const THROUGHPUT_WINDOW = 10, LEGEND_SIZE = 11;

export function timing(records, view) {
  if (!view.shown.record) return emptyFigure(view, view.t.parts("empty.timing"));
  const t = view.t, steps = records.map((r) => r.step);
  const throughput = tokensPerSecond(records);
  const phases = phaseBars(records, view);
  const scale = countScale(records.flatMap((r) => [r.num_rows, r.padded_rows]), view.shown.record.token_budget);
  const data = [...phases, rowBars(records, t, scale.cap), paddedLine(records, t, scale.cap), throughputLine(records, throughput, t),
    ...clippedMarks(records, scale.cap, textPx(view, 10))];
  const parts = { stats: statsParts(records, view.shown.record, throughput, t), phases: phases.map((d) => d.name) };
  let box = frame(view, parts, 1);
  if (box.lines > 1) box = frame(view, parts, box.lines);  // room for y titles wrapped between their languages
  const { plotWidth, stats, margin, panels, titlePx, legendPx } = box;
  const first = Math.min(...steps), last = Math.max(...steps);
  const budget = budgetLine(scale.budget, { xaxis: "x2", yaxis: "y2" }, view);
  const yTitle = (key, extra) => ({ text: box.titles[key].text, font: { size: titlePx, ...extra } });
  return { ids: [...new Set(records.flatMap((r) => r.segments.map((s) => s.request_id)))], data,
    layout: baseLayout(view, {
      barmode: "stack", showlegend: true, margin,
      legend: { orientation: "h", x: 0, y: 1, yanchor: "bottom", font: { size: legendPx },
        bgcolor: "rgba(0,0,0,0)", traceorder: "normal" },
      xaxis: stepAxis(first, last, plotWidth, { anchor: "y", showticklabels: false, matches: "x2" }),
      yaxis: axis({ domain: panels.top, title: yTitle("timing.ms"), rangemode: "tozero", nticks: panels.ticks }),
      xaxis2: stepAxis(first, last, plotWidth, { anchor: "y2",
        title: { text: stats.text, standoff: 4, font: { size: titlePx } } }),
      yaxis2: countAxis(scale.top, panels.ticks, { domain: panels.bottom, title: yTitle("timing.rows") }),
      yaxis3: axis({ overlaying: "y2", side: "right", showgrid: false, rangemode: "tozero",
        title: yTitle("timing.tps", { color: THEME.accent }), tickfont: { color: THEME.accent }, nticks: panels.ticks }),
      shapes: budget.shapes, annotations: [rowsKey(t, panels.bottom[1], plotWidth, legendPx), ...budget.annotations],
    }) };
}

// The figure's frame: margins, the two panels and their y titles, with room each side for y
// titles of ``lines`` lines (a title longer than its panel wraps between its languages).
function frame(view, parts, lines) {
  const titlePx = textPx(view, 12), legendPx = textPx(view, LEGEND_SIZE);
  const side = SIDE + grownBy(view, 13) + grownBy(view, 12) + (lines - 1) * linePx(titlePx);
  const plotWidth = view.size.width - 2 * side;
  const stats = fitParts(parts.stats, { width: plotWidth, size: titlePx, maxLines: 3 });
  const margin = { l: side, r: side, t: legendLines(parts.phases, plotWidth, legendPx) * (legendPx + 8) + 6,
    b: LINE_PX + grownBy(view, 13) + 10 + stats.lines * linePx(titlePx) };
  const panels = domains(view.size.height - margin.t - margin.b, 46 + grownBy(view, 13) + grownBy(view, LEGEND_SIZE));
  const titles = Object.fromEntries(["timing.ms", "timing.rows", "timing.tps"].map((key) =>
    [key, fitParts(view.t.parts(key), { width: panels.px, size: titlePx, separator: "/", maxLines: 2 })]));
  return { plotWidth, stats, margin, panels, titles, titlePx, legendPx,
    lines: Math.max(...Object.values(titles).map((title) => title.lines)) };
}

// The key of the lower panel (rows, padded rows, tok/s), in the gap above it, in ``size`` px.
function rowsKey(t, y, plotWidth, size) {
  const text = [`<span style="color:${THEME.rows}">■</span> ${t.short("timing.rows")}`,
    `<span style="color:${PADDED_COLOR}">┄●┄</span> ${t.short("timing.padded")}`,
    `<span style="color:${THEME.accent}">━</span> ${t.short("timing.tps")}`].join("   ");
  return { xref: "paper", yref: "paper", x: 0, y, xanchor: "left", yanchor: "bottom", yshift: 2,
    showarrow: false, font: { size }, text: shorten(text, plotWidth, size) };
}

// The y domains of the two panels, ``apart`` px (a tick label's height and the lower panel's
// key), and how many ticks each has room for (one per 28 px).
function domains(plotHeight, apart) {
  const h = Math.max(plotHeight, 1), gap = apart / h, px = (h - apart) / 2;
  return { top: [0.5 + gap / 2, 1], bottom: [0, 0.5 - gap / 2], ticks: Math.max(2, Math.floor(px / 28)), px };
}

// One stacked bar per phase the source declares, and "other": the rest of the step's total.
function phaseBars(records, view) {
  const t = view.t, phases = view.meta.phases;
  const label = (name) => esc(t.has(`phase.${name}`) ? t.short(`phase.${name}`) : name);
  const bars = phases.map(({ name, color }) => ({
    type: "bar", name: label(name),
    x: records.map((r) => r.step), y: records.map((r) => r.durations_ms[name] ?? 0),
    xaxis: "x", yaxis: "y", marker: { color }, meta: { role: "phase", phase: name },
    hovertemplate: `${esc(t("hover.step", { step: "%{x}" }))} · ${label(name)} %{y:.1f} ms<extra></extra>`,
  }));
  const other = records.map((r) => Math.max(0, r.durations_ms.total -
    phases.reduce((sum, { name }) => sum + (r.durations_ms[name] ?? 0), 0)));
  bars.push({ type: "bar", name: label("other"), x: records.map((r) => r.step), y: other,
    xaxis: "x", yaxis: "y", marker: { color: OTHER_COLOR }, meta: { role: "phase", phase: "other" },
    hovertemplate: `${esc(t("hover.step", { step: "%{x}" }))} · ${label("other")} %{y:.1f} ms<extra></extra>` });
  return bars;
}

const clipAt = (value, cap) => (cap === null ? value : Math.min(value, cap));

const peak = (r) => Math.max(r.num_rows, r.padded_rows);

// Where a spike was clipped at ``cap``: a mark at the cap on each, the highest's true value written
// (side by side, the labels would overlap, ``size`` px), every one's in its hover (rows / padded rows).
function clippedMarks(records, cap, size) {
  const spikes = cap === null ? [] : records.filter((r) => peak(r) > cap);
  if (!spikes.length) return [];
  const top = Math.max(...spikes.map(peak));
  return [{ type: "scatter", mode: "markers+text", x: spikes.map((r) => r.step), y: spikes.map(() => cap),
    text: spikes.map((r) => (peak(r) === top ? `▲${top}` : "")), textposition: "bottom center",
    textfont: { size, color: THEME.text }, cliponaxis: false, xaxis: "x2", yaxis: "y2", showlegend: false,
    marker: { symbol: "triangle-up", size: 8, color: PADDED_COLOR }, meta: { role: "clipped" },
    customdata: spikes.map((r) => [r.num_rows, r.padded_rows]), name: "clipped",
    hovertemplate: "%{x}: %{customdata[0]} / %{customdata[1]}<extra></extra>" }];
}

function rowBars(records, t, cap) {
  return { type: "bar", name: esc(t("timing.rows")), x: records.map((r) => r.step), y: records.map((r) => clipAt(r.num_rows, cap)),
    customdata: records.map((r) => r.num_rows),
    xaxis: "x2", yaxis: "y2", marker: { color: THEME.rows }, meta: { role: "rows" }, showlegend: false,
    hovertemplate: `${esc(t("hover.rows_step", { step: "%{x}", rows: "%{customdata}" }))}<extra></extra>` };
}

function paddedLine(records, t, cap) {
  return { type: "scatter", mode: "lines+markers", name: esc(t("timing.padded")), x: records.map((r) => r.step),
    y: records.map((r) => clipAt(r.padded_rows, cap)), customdata: records.map((r) => r.padded_rows), xaxis: "x2", yaxis: "y2", meta: { role: "padded" }, showlegend: false,
    line: { color: PADDED_COLOR, dash: "dot", width: 1.5 }, marker: { size: 4 },
    hovertemplate: `${esc(t("hover.padded", { step: "%{x}", rows: "%{customdata}" }))}<extra></extra>` };
}

function throughputLine(records, throughput, t) {
  return { type: "scatter", mode: "lines", name: esc(t("timing.tps")), x: records.map((r) => r.step), y: throughput,
    xaxis: "x2", yaxis: "y3", line: { color: THEME.accent, width: 2 }, meta: { role: "throughput" }, showlegend: false,
    hovertemplate: `${esc(t("hover.tps", { step: "%{x}" }))} %{y:.1f}<extra></extra>` };
}

// Generated tokens per second over the last 10 records. Steps missing from the window (the hub
// dropped them) count as sampling as many tokens as the records received, so drops do not
// lower the curve.
export function tokensPerSecond(records) {
  return records.map((r, i) => {
    const window = records.slice(Math.max(0, i - THROUGHPUT_WINDOW + 1), i + 1);
    const first = window[0], span = r.t_end - first.t_start;
    const generated = window.reduce((a, x) => a + Object.keys(x.sampled || {}).length, 0);
    return span > 0 ? (generated * (r.step - first.step + 1)) / window.length / span : 0;
  });
}

// The shown step's time (shown_step.js: the latest that ran work), the throughput, the padding.
function statsParts(records, shown, throughput, t) {
  const packed = records.reduce((a, r) => a + r.num_rows, 0);
  const padded = records.reduce((a, r) => a + r.padded_rows, 0);
  return [t.short("timing.step"), t.short("timing.last", { ms: shown.durations_ms.total.toFixed(0) }),
    `${throughput[throughput.length - 1].toFixed(1)} ${t.short("timing.tps")}`,
    t.short("timing.padding", { ratio: packed ? (padded / packed).toFixed(2) : "1.00" })];
}

// Rows of a horizontal legend of ``size`` px text as Plotly lays it out: one row when every item
// (symbol, text, gap) fits the plot's width, else a grid whose columns are the widest item's.
function legendLines(names, width, size) {
  const items = names.map((name) => textWidth(name, size) + 40);
  if (items.reduce((a, b) => a + b, 0) + 5 * (items.length - 1) < width) return 1;
  const widest = Math.max(...items);
  return Math.ceil(items.length / Math.max(1, Math.ceil((width - widest) / (widest + 5))));
}
