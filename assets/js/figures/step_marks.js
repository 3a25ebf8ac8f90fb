// Marks over the token layout's recent steps: which data-parallel rank ran each step (a symbol
// and colour per rank, on top of the step's bar), and a cross where a step of an engine with one
// rank scheduled no tokens (such a step has no bar). Each kind of mark is keyed in the history's
// axis title, so a projector's audience can tell the ranks apart without hovering.
import { esc, THEME } from "./common.js";
import { rankOf } from "../shown_step.js";

const RANK_MARKS = [["circle", "●", "#ffffff"], ["diamond", "◆", THEME.accent], ["square", "■", "#5fd3f3"],
  ["triangle-up", "▲", "#ff9de2"]];
const EMPTY_MARK = ["x-thin-open", "×", THEME.muted];
export const MARK_PX = 10;

// The marks of ``records``: [{rank, records, key (Plotly HTML for the axis title)}], by rank.
export function stepMarks(records, view) {
  const groups = new Map();
  for (const record of records) {
    const rank = rankOf(record);
    if (rank === null && record.num_rows) continue;
    if (!groups.has(rank)) groups.set(rank, []);
    groups.get(rank).push(record);
  }
  return [...groups].sort(([a], [b]) => (a ?? -1) - (b ?? -1)).map(([rank, marked]) => {
    const [, glyph, color] = markOf(rank);
    return { rank, records: marked, key: `<span style="color:${color}">${glyph}</span> ${esc(markName(rank, view.t))}` };
  });
}

// One scatter trace per mark, ``lift`` rows above each step's bar (a marker's height).
export function markTraces(marks, view, lift) {
  return marks.map(({ rank, records }) => {
    const [symbol, , color] = markOf(rank);
    return { type: "scatter", mode: "markers", xaxis: "x2", yaxis: "y2", cliponaxis: false,
      x: records.map((r) => r.step), y: records.map((r) => r.num_rows + lift), name: esc(markName(rank, view.t)),
      meta: { role: rank === null ? "empty" : "rank", rank },
      marker: { symbol, color, size: MARK_PX, line: { color: rank === null ? color : THEME.outline, width: rank === null ? 2 : 1 } },
      customdata: records.map((r) => markHover(r, rank, view.t)), hovertemplate: "%{customdata}<extra></extra>" };
  });
}

function markOf(rank) {
  return rank === null ? EMPTY_MARK : RANK_MARKS[rank % RANK_MARKS.length];
}

function markName(rank, t) {
  return rank === null ? t("layout.empty_step") : t("rank.name", { rank });
}

function markHover(record, rank, t) {
  const parts = [t("hover.step", { step: record.step })];
  if (rank !== null) parts.push(t("rank.own_step", { rank, step: record.source.rank_step }));
  if (!record.num_rows) parts.push(t("layout.empty_step"));
  return esc(parts.join(" · "));
}
