// 3. Attention segments: each request's query rows against its own keys only (the ragged block
// diagonal). Rows are drawn at their true positions (cu_seqlens_q). Along x each request has a
// band: its cached keys (attended by every row) compressed into a hatched block when long, then
// this step's keys at full scale (a triangle for a prefill, one row for a decode). Key-count
// labels are thinned by their pixel width so that no two overlap.
import { axis, axisTitle, baseLayout, colorOf, emptyFigure, esc, grownBy, kindText, LINE_PX, rowsText,
  textPx, titleAnnotation } from "./common.js";
import { textWidth } from "../text_fit.js";

const MARGIN = { l: 72, r: 16 };  // l: tick labels and a y title of up to two lines
const TICK_SIZE = 12, NOTE_SIZE = 12, MAX_LIST = 10;

export function attention(records, view) {
  const record = view.shown.record;
  if (!record) return emptyFigure(view, view.t.parts("empty.attention"));
  const bands = layoutBands(record);
  const header = titleAnnotation(headerParts(record), { widthPx: view.size.width - 8,
    hover: fullLists(record) });
  const left = MARGIN.l + grownBy(view, 13) + 2 * grownBy(view, 12);  // y tick labels, a y title of 2 lines
  header.annotation.xshift = -left + 4;
  const plotWidth = view.size.width - left - MARGIN.r;
  const compressed = bands.some((b, i) => b.keysStart - b.start < record.segments[i].num_cached);
  const xTitle = axisTitle(view, [...view.t.parts("attention.x"), ...(compressed ? view.t.parts("attention.x_note") : [])],
    plotWidth, 3);
  const tickPx = textPx(view, TICK_SIZE);
  const margin = { ...MARGIN, l: left, t: header.height, b: LINE_PX + grownBy(view, TICK_SIZE) + 8 + xTitle.height };
  const plotHeight = view.size.height - margin.t - margin.b;
  const yTitle = axisTitle(view, view.t.parts("attention.y"), plotHeight);
  const notes = segmentNotes(record, bands, view, plotHeight);
  const range = xRange(bands, [...notes, lastLabel(record, bands, tickPx)], plotWidth);
  const ticks = keyTicks(record, bands, view, plotWidth / range, tickPx);
  const data = record.segments.flatMap((s, i) => segmentTraces(s, bands[i], view));
  return { ids: record.segments.map((s) => s.request_id), data, layout: baseLayout(view, {
    margin,
    xaxis: axis({ range: [0, range], tickvals: ticks.values, ticktext: ticks.text, tickfont: { size: tickPx },
      title: { ...xTitle, standoff: 6 }, zeroline: false, showgrid: false }),
    yaxis: axis({ range: [record.num_rows, 0], tickvals: rowTicks(record.cu_seqlens_q, plotHeight, record.num_rows, view),
      showgrid: false, zeroline: false, tickformat: "d", title: yTitle }),
    annotations: [header.annotation, ...notes.map((n) => n.annotation)],
  }) };
}

// x extents of each request's band: [start, end of the cached block, end].
function layoutBands(record) {
  const total = record.num_rows;
  const compressed = (c) => Math.min(c, Math.max(16, Math.round(total / 2)));
  const widths = record.segments.map((s) => compressed(s.num_cached) + s.num_rows);
  const gap = Math.max(2, Math.round(widths.reduce((a, b) => a + b, 0) * 0.03));
  let offset = 0;
  return record.segments.map((s, i) => {
    const band = { start: offset, keysStart: offset + compressed(s.num_cached), end: offset + widths[i] };
    offset += widths[i] + gap;
    return band;
  });
}

function segmentTraces(s, band, view) {
  const color = colorOf(view, s.request_id), rid = esc(s.request_id), t = view.t;
  const r0 = s.row_start, n = s.num_rows, c = s.num_cached, cw = band.keysStart - band.start;
  const hover = `${rid} · ${kindText(t, s.kind)}<br>${esc(t("attention.q", { rows: rowsText(t, r0, n),
    first: c, last: s.num_keys - 1 }))}<br>${esc(t(c ? "attention.keys_cached" : "attention.keys",
    { last: s.num_keys - 1, cached: c }))}<extra></extra>`;
  const traces = [];
  if (cw) {
    const x0 = band.start, x1 = band.keysStart;
    traces.push({ type: "scatter", mode: "lines", x: [x0, x1, x1, x0, x0], y: [r0, r0, r0 + n, r0 + n, r0],
      fill: "toself", fillcolor: color, opacity: 0.55, line: { color, width: 1 }, hoveron: "fills",
      fillpattern: cw < c ? { shape: "/", fgcolor: "rgba(0,0,0,0.5)", bgcolor: color, size: 6 } : undefined,
      name: rid, meta: { role: "cached", rid: s.request_id, cached: c, drawn: cw }, hovertemplate: hover });
  }
  const [xs, ys] = staircase(band.keysStart, r0, n);
  traces.push({ type: "scatter", mode: "lines", x: xs, y: ys, fill: "toself", fillcolor: color,
    line: { color, width: 1.5 }, hoveron: "fills+points", opacity: 0.95, name: rid, hovertemplate: hover,
    meta: { role: "segment", rid: s.request_id, rows: [r0, r0 + n], keys: s.num_keys, cached: c } });
  return traces;
}

// The causal block of this step's keys: row j of the segment sees keys up to j (a triangle,
// drawn as a staircase of at most 48 steps), all at full scale: n rows wide and n rows high.
function staircase(x0, r0, n) {
  const xs = [x0], ys = [r0], steps = Math.min(n, 48);
  for (let j = 0; j < steps; j++) {
    const a = Math.floor((j * n) / steps), b = Math.floor(((j + 1) * n) / steps);
    xs.push(x0 + b, x0 + b);
    ys.push(r0 + a, r0 + b);
  }
  xs.push(x0, x0);
  ys.push(r0 + n, r0);
  return [xs, ys];
}

// "A 100×101" right of a segment tall enough to hold a line of text.
function segmentNotes(record, bands, view, plotHeight) {
  const pxPerRow = plotHeight / Math.max(1, record.num_rows), size = textPx(view, NOTE_SIZE);
  return record.segments.flatMap((s, i) => {
    if (s.num_rows * pxPerRow < LINE_PX + grownBy(view, NOTE_SIZE)) return [];
    const text = ` ${esc(s.request_id)} ${s.num_rows}×${s.num_keys}`;
    return [{ end: bands[i].end, width: textWidth(text, size) + 4, annotation: { x: bands[i].end,
      y: s.row_start + s.num_rows / 2, xanchor: "left", showarrow: false, text,
      font: { color: colorOf(view, s.request_id), size } } }];
  });
}

// The x range: every band, and room right of each note for its text.
function xRange(bands, notes, plotWidth) {
  let range = bands[bands.length - 1].end * 1.02;
  for (const note of notes) range = Math.max(range, note.end * plotWidth / Math.max(1, plotWidth - note.width));
  return range;
}

// The last key label (``size`` px), centred on the last band's end, may reach into the right margin.
function lastLabel(record, bands, size) {
  const s = record.segments[record.segments.length - 1];
  return { end: bands[bands.length - 1].end, width: textWidth(`${esc(s.request_id)} ${s.num_keys}`, size) / 2 + 3 - MARGIN.r };
}

// One tick per band end ("A 501": the request's key count), kept only where its label clears
// the previous kept label and the plot's edges (labels of ``size`` px).
function keyTicks(record, bands, view, pxPerUnit, size) {
  const values = [], text = [];
  let lastRight = 0;
  record.segments.forEach((s, i) => {
    const label = `${esc(s.request_id)} ${s.num_keys}`;
    const half = textWidth(label, size) / 2 + 3, x = bands[i].end * pxPerUnit;
    if (x - half < lastRight) return;
    values.push(bands[i].end);
    text.push(`<span style="color:${colorOf(view, s.request_id)}">${esc(s.request_id)}</span> ${s.num_keys}`);
    lastRight = x + half;
  });
  return { values, text };
}

// cu_seqlens_q, thinned where two would be closer than a label's height.
function rowTicks(cu, plotHeight, total, view) {
  const minGap = ((14 + grownBy(view, 13)) * Math.max(1, total)) / Math.max(1, plotHeight);
  const ticks = [];
  for (const v of cu) if (!ticks.length || v - ticks[ticks.length - 1] >= minGap) ticks.push(v);
  return ticks;
}

function headerParts(record) {
  return [`cu_seqlens_q = [${abbreviate(record.cu_seqlens_q)}]`, `seq_lens_k = [${abbreviate(record.seq_lens_k)}]`];
}

function fullLists(record) {
  const long = record.cu_seqlens_q.length > MAX_LIST;
  return long ? `cu_seqlens_q = [${record.cu_seqlens_q.join(", ")}]<br>seq_lens_k = [${record.seq_lens_k.join(", ")}]` : null;
}

function abbreviate(values) {
  return values.length <= MAX_LIST ? values.join(", ")
    : `${values.slice(0, 5).join(", ")}, …, ${values.slice(-3).join(", ")}`;
}
