// What the four figure builders share. A builder is pure: (records, view) -> {data, layout,
// ids}, where ``view`` = {meta (palette, phases: from the server's snapshot), requests (the
// state's entries, for colours), t (strings), size ({width, height} of the figure in px)} and
// ``ids`` lists the request ids it drew. Colours are the server's; the theme's greys are here.
// ``view.minText`` (the stage layout's 14 px, for a projector; else none) raises every text
// size a builder draws (textPx), and the margins that hold a text grow with it (grownBy).
import { escapeText, fitParts } from "../text_fit.js";

export const THEME = { text: "#d8dee9", muted: "#8892a6", grid: "#2b3345", plot: "#111722",
  outline: "#0b0e14", alarm: "#ff6b6b", accent: "#edc948", rows: "#5b8def" };
export const FONT = "Inter, 'DejaVu Sans', 'Noto Sans CJK SC', 'WenQuanYi Micro Hei', system-ui, sans-serif";
export const TITLE_SIZE = 14;
export const LINE_PX = 18;  // one line of 14 px text
export const esc = escapeText;

// A text of ``size`` px as this view draws it: at least view.minText.
export function textPx(view, size) {
  return Math.max(size, view.minText || 0);
}

// How many px a line of ``size`` px text grew in this view (its box is 1.3 times its size): a
// margin that holds it grows as much.
export function grownBy(view, size) {
  return Math.ceil(1.3 * (textPx(view, size) - size));
}

// One line of text of ``size`` px: 16 for 12 px, LINE_PX for 14 px.
export function linePx(size) {
  return size + 4;
}

export function baseLayout(view, extra) {
  return { paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: THEME.plot,
    font: { color: THEME.text, size: textPx(view, 13), family: FONT }, showlegend: false, autosize: true,
    hoverlabel: { font: { size: textPx(view, 13), family: FONT } }, uirevision: "keep",
    width: view.size.width, height: view.size.height, ...extra };
}

export function axis(extra) {
  return { gridcolor: THEME.grid, zerolinecolor: THEME.grid, linecolor: THEME.grid,
    tickangle: 0, ...extra };
}

// A figure with nothing to draw yet: ``message`` (a text, or its languages apart: t.parts)
// centred, wrapped into the figure's width (both languages on one line did not fit a panel).
export function emptyFigure(view, message) {
  const size = 15, margin = 16;
  const parts = (Array.isArray(message) ? message : [message]).map(esc);
  const fitted = fitParts(parts, { width: view.size.width - 2 * margin, size, maxLines: 4 });
  return { ids: [], data: [], layout: baseLayout(view, {
    margin: { l: margin, r: margin, t: margin, b: margin },
    xaxis: axis({ visible: false }), yaxis: axis({ visible: false }),
    annotations: [{ text: fitted.text, showarrow: false, font: { size, color: THEME.muted },
      xref: "paper", yref: "paper", x: 0.5, y: 0.5, hovertext: fitted.hover ?? undefined }],
  }) };
}

// The palette index of a request: the one the server gave it, else one from its id.
export function colorIndex(view, rid) {
  const entry = view.requests.get(rid);
  const n = view.meta.palette.length;
  return entry && entry.color != null ? entry.color % n : hashIndex(rid, n);
}

export function colorOf(view, rid) {
  return view.meta.palette[colorIndex(view, rid)];
}

function hashIndex(rid, n) {
  let h = 0;
  for (const ch of String(rid)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return h % n;
}

export const isPrefill = (segment) => segment.kind !== "decode";

export function rowsText(t, start, n) {
  return n === 1 ? t("hover.row", { row: start }) : t("hover.rows", { first: start, last: start + n - 1 });
}

export function kindText(t, kind) {
  return t(`kind.${kind}`);
}

// A colour-filled (hatched when prefill) bar marker for one segment.
export function segmentMarker(view, segment, lineWidth) {
  const color = colorOf(view, segment.request_id);
  const marker = { color, line: { color: THEME.outline, width: lineWidth } };
  if (isPrefill(segment)) {
    marker.pattern = { shape: "/", bgcolor: color, fgcolor: "rgba(0,0,0,0.45)", fillmode: "overlay",
      size: 7, solidity: 0.25 };
  }
  return marker;
}

// A title annotation above the plot, wrapped to the ``widthPx`` it has; what had to be cut,
// and ``hover`` (Plotly HTML) if given, show on hover. Returns the annotation and its height.
export function titleAnnotation(parts, { widthPx, x = 0, xanchor = "left", maxLines = 2, size = TITLE_SIZE, hover = null }) {
  const fit = fitParts(parts, { width: widthPx, size, maxLines });
  // yshift: clear of a tick label centred on the plot's top edge
  const annotation = { xref: "paper", yref: "paper", x, y: 1, xanchor, yanchor: "bottom", yshift: 10,
    showarrow: false, align: xanchor === "right" ? "right" : "left", text: fit.text, font: { size } };
  const hovertext = [fit.hover && esc(fit.hover), hover].filter(Boolean).join("<br>");
  if (hovertext) Object.assign(annotation, { hovertext, captureevents: true });
  return { annotation, height: fit.lines * LINE_PX + 14 };
}

// An axis title fitted along ``lengthPx`` (wrapped between its parts, at most ``maxLines``);
// ``height``: its lines' px.
export function axisTitle(view, parts, lengthPx, maxLines = 2) {
  const size = textPx(view, 12), fit = fitParts(parts, { width: lengthPx, size, maxLines });
  return { text: fit.text, lines: fit.lines, font: { size }, height: fit.lines * linePx(size) };
}

// A step axis: whole steps only (never fractions), a tick at least every 48 px. The range is
// left to autorange, so a zoom the user made stays (uirevision) while new steps arrive.
export function stepAxis(first, last, plotWidth, extra) {
  const span = Math.max(1, last - first + 1);
  const most = Math.max(1, Math.floor(plotWidth / 48));
  let dtick = 1;
  for (const d of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]) { dtick = d; if (span / d <= most) break; }
  return axis({ autorange: true, tickmode: "linear", tick0: 0, dtick, tickformat: "d", ...extra });
}

const HEADROOM = 1.15, JUST_ABOVE = 1.3, SPIKE = 4;

// The y scale of a count chart (rows): [0, top] on the data's own range with headroom; a spike
// (above SPIKE x the values' 90th percentile) is clipped at ``cap`` (null: none); the budget is
// shown (as a line) when it lies within or just above the data. ``clip`` false: no clipping.
export function countScale(values, budget, clip = true) {
  const sorted = [...values].sort((a, b) => a - b);
  const p90 = sorted.length ? sorted[Math.floor(0.9 * (sorted.length - 1))] : 0;
  const spikeAt = clip ? SPIKE * Math.max(p90, 1) : Infinity;
  const kept = sorted.filter((v) => v <= spikeAt);
  const clipped = kept.length < sorted.length;
  let top = Math.max(1, Math.ceil(Math.max(1, ...kept) * HEADROOM));
  const showBudget = budget > 0 && budget <= top * JUST_ABOVE && !(clipped && budget > top);
  if (showBudget) top = Math.max(top, Math.ceil(budget * 1.08));
  return { top, cap: clipped ? top : null, budget: showBudget ? budget : null };
}

// A count axis (rows, tokens) on [0, top]: whole-number ticks only (never "0, 1, 1"), at most ``ticks``.
export function countAxis(top, ticks, extra) {
  let dtick = 1;
  for (const d of [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000]) { dtick = d; if (top / d <= ticks) break; }
  return axis({ range: [0, top], tickmode: "linear", tick0: 0, dtick, tickformat: "d", ...extra });
}

// The budget as a dashed line across a count chart (x: ``xaxis``, y: ``yaxis``), labelled "budget N".
export function budgetLine(budget, { xaxis, yaxis }, view) {
  if (budget === null) return { shapes: [], annotations: [] };
  const line = { type: "line", xref: `${xaxis} domain`, yref: yaxis, x0: 0, x1: 1, y0: budget, y1: budget,
    line: { color: THEME.accent, width: 1, dash: "dash" }, name: "budget" };
  const label = { xref: `${xaxis} domain`, yref: yaxis, x: 1, y: budget, xanchor: "right", yanchor: "bottom",
    showarrow: false, name: "budget", font: { size: textPx(view, 11), color: THEME.accent },
    text: esc(view.t("chart.budget_line", { budget })) };
  return { shapes: [line], annotations: [label] };
}
