// 2. Block tables (each scheduled request's logical -> physical blocks) and the whole KV pool
// (owner colour, free, cached, shared). A pool too large to ship per step (kv.ref_counts null,
// schema v2) is drawn as counts only.
import { axis, baseLayout, colorIndex, emptyFigure, esc, grownBy, linePx, textPx, THEME, titleAnnotation } from "./common.js";
import { rankOf } from "../shown_step.js";
import { fitParts, textWidth } from "../text_fit.js";

const MAX_TABLES = 16, MAX_LOGICAL = 64, MAX_POOL_CELLS = 4096;
const TABLES = [0, 0.52], POOL = [0.58, 1];

export function blockTables(records, view) {
  const record = view.shown.record;
  if (!record) return emptyFigure(view, view.t.parts("empty.blocks"));
  const ids = Object.keys(record.block_tables).slice(0, MAX_TABLES);
  const tickPx = textPx(view, 11), titlePx = textPx(view, 12);
  const margin = { l: Math.min(120, Math.max(40, ...ids.map((rid) => textWidth(esc(rid), tickPx) + 12))), r: 12 };
  const plotWidth = view.size.width - margin.l - margin.r;
  const titles = panelTitles(record, view, ids.length, margin, plotWidth);
  const t = view.t;
  const tables = tableCells(record, view, ids);
  const logical = fitParts([...t.parts("blocks.logical"), ...(tables.shared.x.length ? t.parts("blocks.shared") : [])],
    { width: plotWidth * (TABLES[1] - TABLES[0]), size: titlePx, maxLines: 3 });
  const legend = fitParts(legendParts(record, view), { width: plotWidth * (POOL[1] - POOL[0]), size: titlePx, maxLines: 5 });
  Object.assign(margin, { t: titles.height, b: Math.max(legend.lines, logical.lines) * linePx(titlePx) + 24 + grownBy(view, 13) });
  const plotHeight = view.size.height - margin.t - margin.b;
  const tableCell = cellPixels(plotWidth * (TABLES[1] - TABLES[0]), plotHeight, tables.columns, ids.length);
  const data = [tablesTrace(tables, ids, tableCell, view), sharedMarkers(tables, tableCell)];
  const pool = record.kv.ref_counts ? poolTrace(record, view, plotWidth, plotHeight) : null;
  if (pool) data.push(pool);
  return { ids, data, layout: baseLayout(view, {
    margin,
    xaxis: axis({ domain: TABLES, title: { text: logical.text, standoff: 4, font: { size: titlePx } },
      showgrid: false, zeroline: false, tickformat: "d" }),
    yaxis: axis({ autorange: "reversed", showgrid: false, type: "category", tickfont: { size: tickPx } }),
    xaxis2: axis({ domain: POOL, anchor: "y2", showticklabels: false, showgrid: false, zeroline: false,
      title: { text: legend.text, standoff: 4, font: { size: titlePx } } }),
    yaxis2: axis({ anchor: "x2", autorange: "reversed", showticklabels: false, showgrid: false,
      zeroline: false, scaleanchor: pool ? "x2" : undefined }),
    annotations: [...titles.annotations, ...(pool ? [] : [countsOnly(record, view)])],
  }) };
}

// The two panel titles, each fitted over its own half so they never meet.
function panelTitles(record, view, shown, margin, plotWidth) {
  const t = view.t, total = Object.keys(record.block_tables).length;
  const left = [...t.parts("blocks.title"), ...t.parts("blocks.size", { size: record.kv.block_size })];
  if (total > shown) left.push(...t.parts("blocks.some", { shown, total }));
  const tables = titleAnnotation(left, { widthPx: plotWidth * TABLES[1] + margin.l - 8, maxLines: 3 });
  tables.annotation.xshift = -margin.l + 4;
  const rank = rankOf(record);  // each data-parallel rank has a pool of its own: say whose
  const owner = rank === null ? [] : t.parts("rank.name", { rank });
  const pool = titleAnnotation([...owner, ...t.parts("blocks.pool", { n: record.kv.num_blocks })],
    { widthPx: plotWidth * (1 - POOL[0]), x: 1, xanchor: "right", maxLines: 3 });
  return { annotations: [tables.annotation, pool.annotation], height: Math.max(tables.height, pool.height) };
}

// "52 used + 676 free = 728 · 369 cached (340 free)": used and free add up to the pool; cached
// blocks overlap both (a free block keeps its prefix until it is reused; 340 of the 369 are). Parts wrap
// where a line is full, each math part keeping its sign.
function legendParts(record, view) {
  const kv = record.kv, meta = view.meta, t = view.t, square = (color) => `<span style="color:${color}">■</span>`;
  const cachedFree = kv.cached && kv.ref_counts ? kv.cached.filter((b) => kv.ref_counts[b] === 0).length : null;
  return [{ text: `${kv.num_blocks - kv.num_free} ${t.short("blocks.used")}` },
    { text: `+ ${square(meta.free_color)} ${kv.num_free} ${t.short("blocks.free")}`, before: " " },
    { text: `= ${kv.num_blocks}`, before: " " },
    { text: `${square(meta.cached_color)} ${kv.num_cached} ${t.short("blocks.cached")}`, before: " · " },
    cachedFree === null ? null : { text: t.short("blocks.of_them_free", { free: cachedFree }), before: " " }];
}

// The table cells: colour index, block id and hover text per (request, logical block).
function tableCells(record, view, ids) {
  const kv = record.kv;
  const columns = Math.min(MAX_LOGICAL, Math.max(1, ...ids.map((rid) => record.block_tables[rid].length)));
  const z = [], text = [], hover = [], shared = { x: [], y: [] };
  for (const rid of ids) {
    const table = record.block_tables[rid];
    const zr = [], tr = [], hr = [];
    for (let j = 0; j < columns; j++) {
      const b = table[j];
      if (b === undefined) { zr.push(null); tr.push(""); hr.push(""); continue; }
      const holder = (kv.owners && kv.owners[b]) || rid;
      const refs = kv.ref_counts ? kv.ref_counts[b] : null;
      zr.push(colorIndex(view, holder));
      tr.push(String(b));
      if (refs > 1) { shared.x.push(j); shared.y.push(esc(rid)); }
      hr.push(esc(view.t("blocks.cell", { rid, logical: j, physical: b })) +
        (refs === null ? "" : `<br>${esc(view.t("blocks.refs", { n: refs }))}`) +
        (holder !== rid ? `<br>${esc(view.t("blocks.shared_by", { rid: holder }))}` : ""));
    }
    z.push(zr); text.push(tr); hover.push(hr);
  }
  return { z, text, hover, shared, columns };
}

// Block ids are written in cells of at least two lines of their text.
function tablesTrace(tables, ids, cell, view) {
  const size = textPx(view, 11);
  return { type: "heatmap", z: tables.z, text: tables.text, customdata: tables.hover,
    x: [...Array(tables.columns).keys()], y: ids.map(esc), xaxis: "x", yaxis: "y",
    ...colorRange(view.meta), showscale: false, xgap: 2, ygap: 3, meta: { role: "tables", ids },
    texttemplate: cell >= 2 * size ? "%{text}" : "", textfont: { size, color: THEME.outline },
    hovertemplate: "%{customdata}<extra></extra>" };
}

function sharedMarkers(tables, cell) {
  return { type: "scatter", mode: "markers", x: tables.shared.x, y: tables.shared.y, xaxis: "x", yaxis: "y",
    hoverinfo: "skip", meta: { role: "shared" },
    marker: { symbol: "square-open", color: "#ffffff", size: cell, line: { width: 2 } } };
}

// Colour indices: 0..n-1 the palette (requests), n free, n+1 cached: a stepped colour scale.
function colorRange(meta) {
  const colors = [...meta.palette, meta.free_color, meta.cached_color];
  const colorscale = colors.flatMap((c, i) => [[i / colors.length, c], [(i + 1) / colors.length, c]]);
  return { zmin: -0.5, zmax: colors.length - 0.5, colorscale };
}

function poolTrace(record, view, plotWidth, plotHeight) {
  const kv = record.kv, n = view.meta.palette.length;
  const shown = Math.min(kv.num_blocks, MAX_POOL_CELLS);
  const cols = Math.ceil(Math.sqrt(shown * 1.4));
  const cached = new Set(kv.cached || []);
  const z = [], text = [], hover = [];
  for (let row = 0; row * cols < shown; row++) {
    const zr = [], tr = [], hr = [];
    for (let c = 0; c < cols; c++) {
      const b = row * cols + c;
      if (b >= shown) { zr.push(null); tr.push(""); hr.push(""); continue; }
      const refs = kv.ref_counts[b], holder = kv.owners ? kv.owners[b] : null;
      zr.push(refs > 0 && holder ? colorIndex(view, holder) : cached.has(b) ? n + 1 : n);
      tr.push(refs > 1 ? `×${refs}` : "");
      hr.push(esc(view.t(refs > 0 ? "blocks.pool_used" : "blocks.pool_free",
        { block: b, rid: holder ?? "?", n: refs })) + (cached.has(b) ? ` · ${esc(view.t("blocks.pool_cached"))}` : ""));
    }
    z.push(zr); text.push(tr); hover.push(hr);
  }
  const cell = cellPixels(plotWidth * (POOL[1] - POOL[0]), plotHeight, cols, z.length), size = textPx(view, 9);
  return { type: "heatmap", z, text, customdata: hover, xaxis: "x2", yaxis: "y2", ...colorRange(view.meta),
    showscale: false, xgap: 1, ygap: 1, texttemplate: cell >= 2 * size ? "%{text}" : "", meta: { role: "pool" },
    textfont: { size, color: THEME.outline }, hovertemplate: "%{customdata}<extra></extra>" };
}

function countsOnly(record, view) {
  const kv = record.kv;
  return { xref: "x2 domain", yref: "y2 domain", x: 0.5, y: 0.5, showarrow: false,
    font: { size: textPx(view, 13), color: THEME.muted }, text: esc(view.t("blocks.counts_only",
      { n: kv.num_blocks, used: kv.num_blocks - kv.num_free, free: kv.num_free, cached: kv.num_cached })) };
}

// The on-screen size of one cell, for the markers drawn over shared blocks.
function cellPixels(width, height, columns, rows) {
  return Math.max(4, Math.min(width / columns, height / Math.max(1, rows)) - 3);
}
