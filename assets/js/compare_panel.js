// The compare panel: two runs of one arrival pattern side by side, played in sync on the time
// since each run's first arrival: each side's token layout at that moment (the live view's
// builder: stalled decoders named in red), its running decoders' inter-token latency (stalled
// tokens ringed in red) and its requests' TTFT, and under both a table of the whole runs. The
// panel says what was run. It polls /compare/state while a compare runs (started from the
// page's Compare controls) and opens by itself when that compare is done.
import { tokenWhy } from "./autopsy_story.js";
import { better, runOf, TABLE_ROWS, visibleRecords } from "./compare.js";
import { itlOverTime, sharedScale, ttftBars } from "./compare_figures.js";
import { emptyFigure } from "./figures/common.js";
import { stalledIds, tokenLayout } from "./figures/token_layout.js";
import { element, Panel, plot } from "./panel.js";
import { shownStep } from "./shown_step.js";
import { HISTORY } from "./state.js";

const POLL_MS = 1000, FRAME_MS = 100;
export const SPEEDS = [0.25, 0.5, 1, 2];

export function startCompare(doc, { view, fetchImpl = (url) => fetch(url, { cache: "no-store" }) }) {
  return new CompareView(doc, view, fetchImpl);
}

class CompareView {
  constructor(doc, view, fetchImpl) {
    Object.assign(this, { doc, view, fetchImpl, panel: null, parts: null, runs: null, result: null,
      at: 0, playing: false, speed: 1, waiting: false, polling: false, lastFrame: 0 });
    doc.addEventListener("click", (e) => {
      if (e.target.closest("#bs-compare-run")) { this.waiting = true; window.setTimeout(() => this.poll(), POLL_MS); }
      if (e.target.closest("#bs-compare-open")) this.show();
    });
  }

  // Once the page's Compare controls exist: is there a compare to show already?
  attach() {
    if (!this.doc.getElementById("bs-compare-open")) return false;
    this.poll();
    return true;
  }

  async poll() {
    if (this.polling) return;
    this.polling = true;
    let state = null;
    try {
      const response = await this.fetchImpl("/compare/state");
      state = response.ok ? await response.json() : null;
    } catch { state = null; } finally { this.polling = false; }
    if (!state) return;
    this.progress(state);
    if (state.state === "running") window.setTimeout(() => this.poll(), POLL_MS);
    else if (this.waiting && state.state === "done") { this.waiting = false; this.show(); }
    else if (state.state === "failed") this.waiting = false;
  }

  progress(state) {
    const t = this.view().t, line = this.doc.getElementById("bs-compare-progress");
    const button = this.doc.getElementById("bs-compare-open");
    if (button) button.hidden = !state.latest;
    if (!line) return;
    const side = state.running && (state.sides || []).find((s) => s.label === state.running);
    line.textContent = state.state === "running" && side ? t("compare.running", { side: side.label, policy: side.policy, budget: side.budget })
      : state.state === "failed" ? t("compare.failed", { error: state.error || "" }) : "";
  }

  async show() {
    const response = await this.fetchImpl("/compare/result");
    if (!response.ok) return;
    this.result = await response.json();
    this.runs = this.result.sides.map(runOf);
    this.scale = sharedScale(this.runs);
    this.at = firstStall(this.runs) ?? this.scale.seconds;
    this.playing = false;
    if (!this.panel) this.build();
    this.panel.show();
    this.render();
  }

  build() {
    this.panel = new Panel(this.doc, "bs-compare", () => { this.playing = false; });
    this.panel.root.classList.add("bs-compare");
    this.parts = buildBody(this.doc, this.panel.body, this);
  }

  // Language or size changed: draw again (called by the page's draw loop).
  refresh() {
    if (!this.panel || !this.panel.open) return;
    const key = `${this.view().t.lang}:${this.panel.box.clientWidth}`;
    if (key !== this.drawnKey) this.render();
  }

  render() {
    const view = this.view(), t = view.t, parts = this.parts;
    this.drawnKey = `${t.lang}:${this.panel.box.clientWidth}`;
    const [a, b] = this.runs;
    this.panel.chip.hidden = true;
    this.panel.label(t);
    this.panel.title.textContent = t("compare.title");
    this.panel.sub.textContent = t("compare.sub", { a: sidePair(a, t), b: sidePair(b, t), pattern: this.result.pattern.title });
    parts.ran.replaceChildren(...ranLines(this.result, t).map((line) => element(this.doc, "p", "", null, line)));
    this.runs.forEach((run, i) => {
      const side = parts.sides[i];
      side.head.textContent = sideText(run, t);
      for (const name of ["layout", "itl", "ttft"]) side.captions[name].textContent = t(`compare.caption_${name}`);
    });
    showTable(this.doc, parts.table, this.runs, t);
    this.drawCursor();
  }

  // Everything that depends on the cursor: the figures, the scrubber, the time.
  drawCursor() {
    const view = this.colored(), t = view.t, parts = this.parts;
    parts.scrubber.max = String(this.scale.seconds);
    parts.scrubber.value = String(this.at);
    parts.time.textContent = t("compare.time", { at: this.at.toFixed(2), total: this.scale.seconds.toFixed(2) });
    parts.play.textContent = t.short(this.playing ? "compare.pause" : "compare.play");
    const order = this.result.pattern.requests.map((r) => r.request_id);
    const why = (k) => tokenWhy(k, t);
    this.runs.forEach((run, i) => {
      const side = parts.sides[i], records = visibleRecords(run, this.at).slice(-HISTORY), shown = shownStep(records);
      plot(side.layout, (size) => (shown.record ? tokenLayout(records, { ...view, size, shown })
        : emptyFigure({ ...view, size }, t("compare.no_step"))));
      plot(side.itl, (size) => itlOverTime(run, { ...view, size }, this.at, this.scale, why));
      plot(side.ttft, (size) => ttftBars(run, { ...view, size }, this.at, this.scale, order));
    });
  }

  // The views' context, with the compare's requests coloured alike on both sides.
  colored() {
    const view = this.view();
    const requests = new Map(this.result.pattern.requests.map((r, i) => [r.request_id, { color: i }]));
    return { ...view, requests };
  }

  seek(at) {
    this.at = Math.min(Math.max(0, at), this.scale.seconds);
    this.drawCursor();
  }

  toggle() {
    this.playing = !this.playing;
    if (this.playing && this.at >= this.scale.seconds) this.at = 0;
    this.lastFrame = performance.now();
    this.drawCursor();
    if (this.playing) window.requestAnimationFrame((now) => this.tick(now));
  }

  tick(now) {
    if (!this.playing || !this.panel.open) return;
    if (now - this.lastFrame >= FRAME_MS) {
      this.at = Math.min(this.scale.seconds, this.at + ((now - this.lastFrame) / 1000) * this.speed);
      this.lastFrame = now;
      if (this.at >= this.scale.seconds) this.playing = false;
      this.drawCursor();
    }
    window.requestAnimationFrame((next) => this.tick(next));
  }

  debug() {
    if (!this.panel || !this.panel.open) return { open: false };
    return { open: true, id: this.result.id, at: this.at, duration: this.scale.seconds,
      tables: Object.fromEntries(this.runs.map((r) => [r.label, r.table])) };
  }
}

// When the first decode stall of either run ended (the moment to look at first), or null.
function firstStall(runs) {
  const ends = runs.flatMap((run) => {
    const record = run.records.find((r) => stalledIds(r).length);
    return record ? [record.t_end - run.t0] : [];
  });
  return ends.length ? Math.min(...ends) : null;
}

function sideVars(run, t) {
  return { label: run.label, policy: t.pair(`policy.${run.config.policy}`), budget: run.config.max_num_batched_tokens };
}

function sideText(run, t) {
  return t("compare.side", sideVars(run, t));
}

function sidePair(run, t) {
  return t.pair("compare.side", sideVars(run, t));
}

function buildBody(doc, body, owner) {
  const ran = element(doc, "div", "bs-compare-ran", body);
  const controls = element(doc, "div", "bs-compare-controls", body);
  const play = element(doc, "button", "bs-compare-play", controls);
  play.type = "button";
  play.addEventListener("click", () => owner.toggle());
  const speed = element(doc, "select", "bs-compare-speed", controls);
  for (const s of SPEEDS) Object.assign(element(doc, "option", "", speed, `${s}×`), { value: String(s), selected: s === 1 });
  speed.addEventListener("change", () => { owner.speed = Number(speed.value); });
  const scrubber = Object.assign(element(doc, "input", "bs-compare-scrubber", controls), { type: "range", min: "0", step: "0.01" });
  scrubber.addEventListener("input", () => owner.seek(Number(scrubber.value)));
  const time = element(doc, "span", "bs-compare-time", controls);
  const grid = element(doc, "div", "bs-compare-sides", body);
  const sides = ["a", "b"].map((name) => {
    const column = element(doc, "section", "bs-compare-side", grid);
    const head = element(doc, "h3", "", column), captions = {};
    const plotDiv = (cls) => {
      captions[cls] = element(doc, "h4", "bs-compare-caption", column);
      return Object.assign(element(doc, "div", `bs-compare-plot ${cls}`, column), { id: `bs-compare-${cls}-${name}` });
    };
    return { head, layout: plotDiv("layout"), itl: plotDiv("itl"), ttft: plotDiv("ttft"), captions };
  });
  const table = element(doc, "table", "bs-compare-table", body);
  return { ran, play, speed, scrubber, time, sides, table };
}

function ranLines(result, t) {
  const [a] = result.sides;
  const prompts = new Map(a.arrivals.map((x) => [x.request_id, x.num_prompt_tokens]));
  const arrivals = result.pattern.requests.map((r) => t(r.after_decoding ? "compare.arrival_after" : "compare.arrival_at",
    { rid: r.request_id, prompt: prompts.get(r.request_id) ?? "?", s: r.delay_s.toFixed(1), max: r.max_tokens })).join("; ");
  const device = a.hardware ? a.hardware.gpu || a.hardware.device || "" : "";
  const lines = [t("compare.ran", { n: result.pattern.requests.length, model: a.model || result.model, device }),
    t("compare.arrivals", { list: arrivals })];
  if (result.min_step_ms) lines.push(t("compare.slow", { ms: result.min_step_ms }));
  if (result.pattern.capped) lines.push(t("compare.capped"));
  return lines;
}

function showTable(doc, table, runs, t) {
  const best = better(runs);
  const head = element(doc, "tr", "");
  element(doc, "th", "", head, t("compare.metric"));
  for (const run of runs) element(doc, "th", "bs-num", head, sideText(run, t));
  element(doc, "th", "bs-def", head, t("compare.lower"));
  const rows = TABLE_ROWS.map((row) => {
    const tr = element(doc, "tr", "");
    tr.dataset.row = row;
    element(doc, "th", "", tr, t(`compare.row_${row}`));
    for (const run of runs) {
      const value = run.table[row], cell = element(doc, "td", best[row] === run.label ? "bs-num bs-better" : "bs-num", tr,
        value === null ? "–" : row.startsWith("ttft") || row.startsWith("itl") ? `${Math.round(value * 1000)} ms` : String(value));
      Object.assign(cell.dataset, { side: run.label, value: value === null ? "" : String(value) });
    }
    element(doc, "td", "bs-def", tr, t(`compare.row_${row}_def`));
    return tr;
  });
  table.replaceChildren(head, ...rows);
}
