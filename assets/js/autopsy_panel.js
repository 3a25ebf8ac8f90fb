// The request autopsy panel: click a request (its card, or its rows in a view) to see its lane
// step by step, its time to first token split into parts (a partition of [arrival, first
// token], defined in autopsy.js and on screen beside each part), its later tokens' latency with
// the steps that slowed them, and the story of its life. Built from the lanes every record
// feeds (lanes.js), so it works live, in a replay and in the exported report alike.
import { autopsy, roundedParts, TTFT_PARTS } from "./autopsy.js";
import { AUTOPSY_COLORS, CAUSE_COLORS, itlFigure, laneFigure, stateStyle } from "./autopsy_figures.js";
import { story, tokenWhy } from "./autopsy_story.js";
import { colorOf } from "./figures/common.js";
import { element, Panel, plot } from "./panel.js";
import { plainText } from "./text_fit.js";

const SLOWEST = 5;

export function startAutopsy(doc, { book, view, until }) {
  return new AutopsyPanel(doc, book, view, until);
}

class AutopsyPanel {
  // ``view()``: {meta, requests, t} as the figures take it; ``until()``: the last step shown.
  constructor(doc, book, view, until) {
    Object.assign(this, { doc, book, view, until, rid: null, drawn: null, panel: null, parts: null });
    doc.addEventListener("click", (e) => this.cardClicked(e));
  }

  // A click on a request's card opens its autopsy (not on its buttons, nor ending a selection).
  cardClicked(e) {
    const card = e.target.closest && e.target.closest("#bs-texts .bs-req");
    if (!card || e.target.closest("button, a") || String(this.doc.getSelection() || "")) return;
    this.open(card.dataset.rid);
  }

  // Listen to a view's clicks once: a click on a request's rows opens its autopsy.
  wire(el) {
    if (!el || el.dataset.autopsy || !el.on) return;
    el.dataset.autopsy = "1";
    el.on("plotly_click", (event) => {
      const rid = event && event.points && event.points.length ? ridOfPoint(event.points[0]) : null;
      if (rid) this.open(rid);
    });
  }

  open(rid) {
    if (!this.book.lane(rid)) return false;
    this.rid = rid;
    this.ensurePanel().show();
    this.drawn = null;
    this.last = null;
    this.refresh();
    return true;
  }

  ensurePanel() {
    if (!this.panel) {
      this.panel = new Panel(this.doc, "bs-autopsy", () => { this.rid = null; });
      this.parts = buildBody(this.doc, this.panel.body);
    }
    return this.panel;
  }

  // Redraw if open and anything it shows changed (new steps, language, size).
  refresh() {
    this.hint();
    if (!this.rid || !this.panel || !this.panel.open) return;
    const a = autopsy(this.book, this.rid, this.until());
    const view = this.view();
    const key = `${a ? `${a.last}:${a.entries.length}:${a.finish ? 1 : 0}` : "none"}:${view.t.lang}:${this.panel.box.clientWidth}`;
    if (key === this.drawn) return;
    this.drawn = key;
    this.last = a || { rid: this.rid, empty: true };
    this.panel.body.classList.toggle("bs-autopsy-empty", !a);
    if (a) render(this.panel, this.parts, a, view);
    else renderUnseen(this.panel, this.parts, this.rid, view);
  }

  // "Click a request for its autopsy", under the text panels' heading.
  hint() {
    const head = this.doc.querySelector(".bs-texts-head");
    if (!head) return;
    let hint = head.querySelector(".bs-autopsy-hint");
    if (!hint) hint = element(this.doc, "span", "bs-autopsy-hint", head);
    const text = this.view().t("autopsy.hint");
    if (hint.textContent !== text) hint.textContent = text;
  }

  debug() {
    const a = this.rid && this.last;
    if (!a) return { open: null };
    if (a.empty) return { open: a.rid, empty: true };
    return { open: a.rid, ttft: { done: a.ttft.done, total_ms: a.ttft.total * 1000,
      parts_ms: Object.fromEntries(Object.entries(a.ttft.parts).map(([k, v]) => [k, v * 1000])) },
    steps: a.steps.map((s) => [s.step, s.state]), story: story(a).map((l) => l.key) };
  }
}

function ridOfPoint(point) {
  const data = point.data || {}, meta = data.meta || {};
  if (meta.rid) return meta.rid;
  if (meta.ids && Array.isArray(point.pointIndex)) return meta.ids[point.pointIndex[0]];
  if (meta.role === "history" && data.name) return plainText(data.name);
  return null;
}

function buildBody(doc, body) {
  const section = (cls) => element(doc, "section", `bs-autopsy-section ${cls}`, body);
  const notes = element(doc, "div", "bs-autopsy-notes", body);
  const lane = section("bs-autopsy-lane"), ttft = section("bs-autopsy-ttft");
  const itl = section("bs-autopsy-itl"), life = section("bs-autopsy-story");
  const plotDiv = (parent, id) => Object.assign(element(doc, "div", "bs-autopsy-plot", parent), { id });
  return { doc, notes,
    lane: { head: element(doc, "h3", "", lane), legend: element(doc, "div", "bs-legend", lane), plot: plotDiv(lane, "bs-autopsy-lane") },
    ttft: { head: element(doc, "h3", "", ttft), bar: element(doc, "div", "bs-ttft-bar", ttft), table: element(doc, "table", "bs-ttft-parts", ttft) },
    itl: { head: element(doc, "h3", "", itl), legend: element(doc, "div", "bs-legend", itl), plot: plotDiv(itl, "bs-autopsy-itl"),
      slow: element(doc, "ul", "bs-autopsy-slow", itl) },
    story: { head: element(doc, "h3", "", life), list: element(doc, "ol", "bs-autopsy-lines", life) } };
}

function render(panel, parts, a, view) {
  const t = view.t, color = colorOf(view, a.rid);
  panel.label(t);
  panel.chip.style.background = color;
  panel.title.textContent = t("autopsy.title", { rid: a.rid });
  panel.title.style.color = color;
  panel.sub.textContent = summary(a, t);
  showNotes(parts, a, t);
  parts.lane.head.textContent = t("autopsy.lane_title");
  legend(parts.doc, parts.lane.legend, [...new Set(a.steps.map((s) => s.state))]
    .map((state) => [stateStyle(state), t(`autopsy.state_${state}`), t(`autopsy.state_${state}_def`)]));
  plot(parts.lane.plot, (size) => laneFigure(a, { ...view, size }));
  showTtft(parts, a, t);
  showItl(parts, a, view);
  parts.story.head.textContent = t("autopsy.story_title");
  parts.story.list.replaceChildren(...story(a).map((line) => storyLine(parts.doc, line, t)));
}

// A request none of whose steps this page saw (it connected after them).
function renderUnseen(panel, parts, rid, view) {
  const t = view.t, color = colorOf(view, rid);
  panel.label(t);
  panel.chip.style.background = color;
  panel.title.textContent = t("autopsy.title", { rid });
  panel.title.style.color = color;
  panel.sub.textContent = "";
  parts.notes.replaceChildren(element(parts.doc, "p", "bs-autopsy-note", null, t("autopsy.note_none")));
}

function summary(a, t) {
  const state = a.finish ? t.pair("autopsy.finished", { reason: reason(t, a.finish.reason) })
    : t.pair(a.endedUnseen ? "autopsy.ended_unseen" : "autopsy.running");
  return t("autopsy.summary", { prompt: a.prompt ?? "?", outputs: a.outputs, first: a.first, last: a.last, state });
}

function reason(t, value) {
  return t.has(`reason.${value}`) ? t.pair(`reason.${value}`) : value;
}

function showNotes(parts, a, t) {
  const notes = [];
  if (a.dropped) notes.push(t("autopsy.note_dropped", { n: a.dropped }));
  else if (!a.startKnown) notes.push(t("autopsy.note_start", { step: a.first }));
  if (a.missing.length) notes.push(t("autopsy.note_missing", { steps: a.missing.map(([p, q]) => (p === q ? p : `${p}–${q}`)).join(", ") }));
  if (!a.arrivalKnown) notes.push(t("autopsy.note_arrival", { step: a.first }));
  parts.notes.replaceChildren(...notes.map((text) => element(parts.doc, "p", "bs-autopsy-note", null, text)));
}

// [[style, name, definition]] as swatches with their names; the definition is the hover.
function legend(doc, root, items) {
  root.replaceChildren(...items.map(([style, name, definition]) => {
    const item = element(doc, "span", "bs-legend-item");
    swatch(doc, item, style);
    element(doc, "span", "", item, name);
    item.title = definition;
    return item;
  }));
}

function swatch(doc, parent, style) {
  const box = element(doc, "span", "bs-swatch", parent);
  box.style.background = style.color;
  if (style.pattern) box.classList.add(style.pattern.shape === "x" ? "bs-swatch-cross" : "bs-swatch-hatch");
  return box;
}

function partStyle(part) {
  return { color: AUTOPSY_COLORS[part === "queue" ? "waiting" : part],
    pattern: part === "unknown" ? { shape: "x" } : null };
}

function showTtft(parts, a, t) {
  const { ttft } = a;
  const ms = roundedParts(ttft.parts, ttft.total);
  const total = Object.values(ms).reduce((x, y) => x + y, 0);
  const head = ttft.unseen ? t("autopsy.ttft_unseen") : ttft.done
    ? t(ttft.lowerBound ? "autopsy.ttft_at_least" : "autopsy.ttft_title", { ms: total, step: ttft.step })
    : t("autopsy.ttft_so_far", { ms: total });
  parts.ttft.head.textContent = head;
  parts.ttft.head.dataset.ms = String(ttft.unseen ? "" : total);
  parts.ttft.bar.hidden = ttft.unseen;
  parts.ttft.bar.replaceChildren(...(ttft.unseen ? [] : TTFT_PARTS.filter((p) => ms[p] > 0).map((p) => {
    const piece = swatch(parts.doc, null, partStyle(p));
    piece.style.flexGrow = String(ms[p]);
    piece.title = `${t(`autopsy.part_${p}`)}: ${ms[p]} ms`;
    return piece;
  })));
  parts.ttft.table.replaceChildren(...(ttft.unseen ? [] : TTFT_PARTS.map((p) => partRow(parts.doc, p, ms[p], total, t))));
}

function partRow(doc, part, ms, total, t) {
  const row = element(doc, "tr", ms ? "" : "bs-zero");
  row.dataset.part = part;
  row.dataset.ms = String(ms);
  swatch(doc, element(doc, "td", "", row), partStyle(part));
  element(doc, "th", "", row, t(`autopsy.part_${part}`));
  element(doc, "td", "bs-num", row, `${ms} ms`);
  element(doc, "td", "bs-num", row, total ? `${Math.round((100 * ms) / total)}%` : "");
  element(doc, "td", "bs-def", row, t(`autopsy.part_${part}_def`));
  return row;
}

function showItl(parts, a, view) {
  const t = view.t, tokens = a.tokens;
  const why = (k) => tokenWhy(k, t);
  parts.itl.head.textContent = tokens.length ? t("autopsy.itl_title", { n: tokens.length }) : t("autopsy.itl_none");
  legend(parts.doc, parts.itl.legend, [...new Set(tokens.map((k) => k.cause))]
    .map((c) => [{ color: CAUSE_COLORS[c], pattern: c === "unknown" ? { shape: "x" } : null },
      t(`autopsy.cause_${c}`), t(`autopsy.cause_${c}_def`)]));
  parts.itl.plot.hidden = !tokens.length;
  if (tokens.length) plot(parts.itl.plot, (size) => itlFigure(a, { ...view, size }, why));
  const slowest = tokens.filter((k) => k.slow).sort((p, q) => q.itl - p.itl).slice(0, SLOWEST);
  parts.itl.slow.replaceChildren(...slowest.map((k) => element(parts.doc, "li", "", null, plainText(why(k)))));
}

function storyLine(doc, line, t) {
  const li = element(doc, "li", "");
  li.dataset.key = line.key;
  const where = line.from === line.to ? t("autopsy.at_step", { step: line.from }) : t("autopsy.at_steps", { from: line.from, to: line.to });
  element(doc, "span", "bs-story-steps", li, where);
  const vars = { ...line.vars };
  if (vars.kind) vars.kind = t.pair(`kind.${vars.kind}`);
  if (vars.reason) vars.reason = reason(t, vars.reason);
  element(doc, "span", "", li, t(line.key, vars));
  return li;
}
