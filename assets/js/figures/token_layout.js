// 1. Token layout: this step's packed rows on the token budget's scale (a 102-row step of a
// 512 budget covers 102/512 of the width), the same rows zoomed to the step's own width (a
// labelled zoom with its own ticks, where a 1-row decode is readable), and the recent steps.
// Segments are drawn in the record's row order; a line above the strips says so when that is the
// scheduler's order rather than the one the model runner packed (source.row_order). "This step"
// is the shown one (shown_step.js); the history has every step, marked by rank (step_marks.js).
import { axis, axisTitle, baseLayout, budgetLine, colorOf, countAxis, countScale, emptyFigure, esc, grownBy, isPrefill, kindText, rowsText,
  segmentMarker, stepAxis, textPx, THEME, titleAnnotation } from "./common.js";
import { MARK_PX, markTraces, stepMarks } from "./step_marks.js";
import { rankOf } from "../shown_step.js";
import { fitParts, shorten } from "../text_fit.js";

const MARGIN = { l: 56, r: 16, b: 24 };  // b: the history's tick labels, above its title
const STRIP = { label: 16, bar: 22, ticks: 20, gap: 12 };
const MAX_SUM_TERMS = 6, MAX_STALLED = 8;

export function tokenLayout(records, view) {
  const record = view.shown.record;
  if (!record) return emptyFigure(view, view.t.parts("empty.layout"));
  const full = Math.max(record.token_budget, record.num_rows, 1);
  const { annotation, height } = titleAnnotation(titleParts(record, view),
    { widthPx: view.size.width - 8, maxLines: 3 });
  const left = MARGIN.l + grownBy(view, 13) + grownBy(view, 12);  // y tick labels and title
  annotation.xshift = -left + 4;
  const plotWidth = view.size.width - left - MARGIN.r;
  const marks = stepMarks(records, view);
  const historyTitle = axisTitle(view, [...view.t.parts("layout.history_x"), ...marks.map((m) => m.key)], plotWidth, 2);
  const margin = { ...MARGIN, l: left, t: height, b: MARGIN.b + grownBy(view, 13) + historyTitle.height };
  const note = rowOrderNote(record, view);
  const plotHeight = view.size.height - margin.t - margin.b;
  const labels = stripLabels(record, view, plotWidth);
  const geometry = stripGeometry(plotHeight, note ? 1 : 0, view, labels);
  const historyPx = Math.max(1, geometry.history[1] * plotHeight);
  const scale = countScale(records.map((r) => r.num_rows), record.token_budget, false);  // its own range, not the budget's
  const lift = (MARK_PX * scale.top) / historyPx;
  const budget = budgetLine(scale.budget, { xaxis: "x2", yaxis: "y2" }, view);
  const data = [
    ...stripBars(record, view, "x", "y", "rows"), unusedBar(record, view),
    ...stripBars(record, view, "x3", "y3", "zoom"), ...historyBars(records, view), ...markTraces(marks, view, lift),
  ];
  const steps = records.map((r) => r.step);
  return { ids: record.segments.map((s) => s.request_id), data, layout: baseLayout(view, {
    barmode: "overlay", margin, uniformtext: { mode: "hide", minsize: textPx(view, 9) },
    xaxis: countAxis(full, Math.max(2, Math.floor(plotWidth / 48)), { anchor: "y", showgrid: false, zeroline: false,
      tickfont: { size: textPx(view, 10) }, ticks: "outside", fixedrange: true }),
    yaxis: stripAxis(geometry.budget),
    xaxis3: axis({ range: [0, Math.max(1, record.num_rows)], anchor: "y3", showgrid: false,
      zeroline: false, tickfont: { size: textPx(view, 10) }, ticks: "outside", tickformat: "d", fixedrange: true,
      dtick: record.num_rows <= 8 ? 1 : undefined }),  // whole rows: no "0 0 1 1" on a 1-row step
    yaxis3: stripAxis(geometry.zoom),
    xaxis2: stepAxis(Math.min(...steps), Math.max(...steps), plotWidth,
      { anchor: "y2", title: { ...historyTitle, standoff: 4 } }),
    yaxis2: countAxis(scale.top, Math.max(2, Math.floor(historyPx / 28)), { domain: geometry.history,
      title: { text: view.t.short("layout.history_y"), font: { size: textPx(view, 12) } } }),
    shapes: budget.shapes,
    annotations: [annotation, ...labelLines(labels, geometry), ...noteLine(note, geometry, plotWidth, view),
      ...budget.annotations],
  }) };
}

// The y domains of the two strips and of the history, from their pixel heights, below
// ``lines`` lines of notes (their baseline: ``note``) and each strip's label of its own lines;
// labels and ticks grow with their text.
function stripGeometry(plotHeight, lines, view, labels) {
  const h = Math.max(plotHeight, 1);
  const label = STRIP.label + grownBy(view, 11), ticks = STRIP.ticks + grownBy(view, 10);
  const top = h - lines * label;
  const budgetTop = top - labels.budget.lines * label, budgetBottom = budgetTop - STRIP.bar;
  const zoomTop = budgetBottom - ticks - labels.zoom.lines * label, zoomBottom = zoomTop - STRIP.bar;
  const historyTop = Math.max(zoomBottom - ticks - STRIP.gap, h * 0.2);
  return { budget: [budgetBottom / h, budgetTop / h], zoom: [zoomBottom / h, zoomTop / h],
    history: [0, historyTop / h], note: top / h };
}

function stripAxis(domain) {
  return axis({ domain, range: [-0.5, 0.5], fixedrange: true, showticklabels: false,
    showgrid: false, zeroline: false });
}

// The two strips' labels, each wrapped between its languages onto at most two lines.
function stripLabels(record, view, plotWidth) {
  const zoom = record.token_budget / Math.max(1, record.num_rows), size = textPx(view, 11);
  const fit = (key, vars) => fitParts(view.t.parts(key, vars).map(esc), { width: plotWidth, size, maxLines: 2 });
  return { size, budget: fit("layout.budget_strip", { budget: record.token_budget }),
    zoom: fit("layout.zoom_strip", { rows: record.num_rows, zoom: zoom.toFixed(1) }) };
}

function labelLines(labels, geometry) {
  return [[labels.budget, geometry.budget[1]], [labels.zoom, geometry.zoom[1]]].map(([label, y]) => ({
    xref: "paper", yref: "paper", x: 0, y, xanchor: "left", yanchor: "bottom", showarrow: false,
    font: { size: labels.size, color: THEME.muted }, text: label.text }));
}

// Said on screen when the segments are not in the order the model runner packed the rows (a
// source that could not read it gives the scheduler's: source.row_order "scheduled"); null when
// they are (a record from before sources were named is Batchscope's own: packed).
function rowOrderNote(record, view) {
  if (!record.source || record.source.row_order === "packed") return null;
  return { text: view.t("layout.row_order_scheduled"), hover: view.t("layout.row_order_scheduled_def") };
}

function noteLine(note, geometry, plotWidth, view) {
  if (!note) return [];
  const size = textPx(view, 11);
  return [{ xref: "paper", yref: "paper", x: 0, y: geometry.note, xanchor: "left", yanchor: "bottom",
    showarrow: false, name: "row_order", font: { size, color: THEME.accent },
    text: shorten(esc(note.text), plotWidth, size), hovertext: esc(note.hover), captureevents: true }];
}

function stripBars(record, view, xaxis, yaxis, role) {
  return record.segments.map((s) => ({
    type: "bar", orientation: "h", x: [s.num_rows], base: [s.row_start], y: [0], xaxis, yaxis,
    width: 0.9, name: esc(s.request_id), meta: { role, rid: s.request_id },
    text: [`${esc(s.request_id)} ${s.num_rows}`], textposition: "inside", insidetextanchor: "middle",
    textangle: 0, textfont: { color: THEME.outline, size: textPx(view, 12) }, marker: segmentMarker(view, s, 0.5),
    hovertemplate: `${esc(s.request_id)} · ${kindText(view.t, s.kind)}<br>${rowsText(view.t, s.row_start, s.num_rows)}` +
      `<br>${view.t("hover.positions", { first: s.num_cached, last: s.num_keys - 1 })}<extra></extra>`,
  }));
}

function unusedBar(record, view) {
  const unused = Math.max(0, record.token_budget - record.num_rows);
  return { type: "bar", orientation: "h", x: [unused], base: [record.num_rows], y: [0],
    xaxis: "x", yaxis: "y", width: 0.9, name: "unused", meta: { role: "unused" },
    marker: { color: "rgba(127,138,163,0.16)", line: { width: 0 } },
    hovertemplate: `${esc(view.t("hover.unused", { unused, budget: record.token_budget }))}<extra></extra>` };
}

function historyBars(records, view) {
  const traces = new Map();
  for (const r of records) {
    for (const s of r.segments) {
      const key = `${s.request_id}|${isPrefill(s)}`;
      if (!traces.has(key)) {
        traces.set(key, { type: "bar", x: [], y: [], base: [], customdata: [], xaxis: "x2", yaxis: "y2",
          name: esc(s.request_id), width: 0.8, marker: segmentMarker(view, s, 0.5), meta: { role: "history" },
          hovertemplate: `${esc(s.request_id)}<br>${esc(view.t("hover.step", { step: "%{x}" }))} · %{customdata}<extra></extra>` });
      }
      const trace = traces.get(key);
      trace.x.push(r.step); trace.y.push(s.num_rows); trace.base.push(s.row_start);
      trace.customdata.push(`${kindText(view.t, s.kind)} · ${rowsText(view.t, s.row_start, s.num_rows)}`);
    }
  }
  return [...traces.values()];
}

// "step 12: A 1 + B 1 + C 100 = 102 rows of 512 · stalled: A35, B36", in wrap-able parts.
function titleParts(record, view) {
  const t = view.t, segments = record.segments;
  const terms = segments.length && segments.length <= MAX_SUM_TERMS
    ? segments.map((s, i) => ({ text: `<span style="color:${colorOf(view, s.request_id)}">${esc(s.request_id)} ${s.num_rows}</span>`,
      before: i ? " + " : " ", lead: i ? "+ " : "" }))
    : [{ text: t("layout.requests", { n: segments.length }), before: " " }];
  const [rows, ...rowsOther] = t.parts(record.num_rows === 1 ? "layout.rows_one" : "layout.rows",
    { rows: `<b>${record.num_rows}</b>`, budget: record.token_budget });
  const rank = rankOf(record);
  const step = rank === null ? t("layout.step", { step: record.step }) : t("layout.step_rank", { step: record.step, rank });
  const parts = [`${step}:`, ...terms, { text: `= ${rows}`, before: " " }, ...rowsOther,
    ...emptyParts(view.shown, t)];
  if (record.policy !== "mixed") parts.push(...t.parts(`policy.${record.policy}`));
  const stalled = stalledIds(record);
  if (stalled.length) {
    const ids = stalled.slice(0, MAX_STALLED).map(esc).join(", ") +
      (stalled.length > MAX_STALLED ? `, +${stalled.length - MAX_STALLED}` : "");
    parts.push(...t.parts("layout.stalled", { ids }).map((text) => `<span style="color:${THEME.alarm}">${text}</span>`));
  }
  return parts;
}

// "then 2 empty steps · 15 blocks freed": the steps with no tokens since the one shown
// (shown_step.js), and the blocks they freed in its pool.
function emptyParts(shown, t) {
  if (!shown.empty) return [];
  const then = shown.empty === 1 ? t.parts("layout.then_empty_one") : t.parts("layout.then_empty", { n: shown.empty });
  const freed = shown.freed ? t.parts(shown.freed === 1 ? "layout.freed_one" : "layout.freed", { n: shown.freed }) : [];
  return [...then, ...freed].map((text) => `<span style="color:${THEME.accent}">${esc(text)}</span>`);
}

// Requests that are decoding but got no row this step (a prefill_first step stalls them).
export function stalledIds(record) {
  const scheduled = new Set(record.segments.map((s) => s.request_id));
  return Object.entries(record.requests || {})
    .filter(([rid, info]) => info.status === "decoding" && !scheduled.has(rid)).map(([rid]) => rid);
}
