// Batchscope dashboard: wiring. Messages from the telemetry stream go through reduce(); the
// page draws at most once per animation frame: Plotly.react on the four views (figures from
// the pure builders, sized to their elements), the text cards, the header and the replay bar.
import { startAutopsy } from "./autopsy_panel.js";
import { cardOrder, renderCards } from "./cards.js";
import { startCompare } from "./compare_panel.js";
import { colorOf } from "./figures/common.js";
import { VIEWS } from "./figures/index.js";
import { showHeader } from "./header.js";
import { LaneBook } from "./lanes.js";
import { viewedHistory } from "./look_back.js";
import { startReplayBar } from "./replay.js";
import { startStage } from "./stage.js";
import { startPageLanguage } from "./page_language.js";
import { startStageKeys } from "./stage_keys.js";
import { initialState, reduce } from "./state.js";
import { LANGUAGES, loadStrings, saveLanguage, savedLanguage, translator } from "./strings.js";
import { openTelemetry } from "./transport.js";

const SEEN_LIMIT = 256;  // request ids remembered per view, for the tests' debug()

const page = { state: initialState(), table: {}, lang: savedLanguage(window.localStorage),
  t: translator({}), link: "connecting", telemetry: null, drawPending: false,
  seen: Object.fromEntries(VIEWS.map((v) => [v.key, new Set()])), replay: null, lanes: new LaneBook(), autopsy: null,
  compare: null, stage: null, keys: null, language: null };

function dispatch(message) {
  page.state = reduce(page.state, message);
  page.lanes.apply(message);  // every record, for the request autopsy (lanes.js)
  if (message.status || message.type === "snapshot") {
    document.dispatchEvent(new CustomEvent("batchscope:status", { detail: page.state.status }));
    if (page.replay && page.state.status) page.replay.show(page.state.status.replay);
  }
  scheduleDraw();
}

function scheduleDraw() {
  if (page.drawPending) return;
  page.drawPending = true;
  window.requestAnimationFrame(draw);
}

function draw() {
  page.drawPending = false;
  const { state, t } = page;
  showHeader(document, state.status, state.records[state.records.length - 1], t, page.link);
  const drewViews = !state.dirty.views || drawViews();
  const cards = document.getElementById("bs-texts");
  if (cards && state.meta) renderCards(cards, state, t, (rid) => colorOf(viewContext(null), rid));
  if (page.autopsy && state.meta) { page.autopsy.refresh(); page.compare.refresh(); }
  page.stage.label(t);
  page.keys.show(state);
  if (drewViews && (cards || !state.requests.size)) page.state = reduce(page.state, { type: "drawn" });
  else window.setTimeout(scheduleDraw, 200);  // the page's elements or plotly are not there yet
}

function viewContext(element) {
  const size = element ? { width: element.clientWidth || 600, height: element.clientHeight || 360 } : null;
  return { meta: page.state.meta, requests: page.state.requests, shown: page.state.shown, t: page.t, size };
}

function drawViews() {
  const elements = VIEWS.map((v) => document.getElementById(v.id));
  if (!window.Plotly || !page.state.meta || elements.some((e) => !e)) return false;
  const { records, shown } = viewedHistory(page.state), last = records[records.length - 1];  // look_back.js
  VIEWS.forEach((v, i) => {
    const figure = v.build(records, { ...viewContext(elements[i]), shown, minText: page.stage.minText });
    // for tests: the latest step drawn, and the one shown as the current step (shown_step.js)
    figure.layout.meta = { step: last ? last.step : null, shown: shown.record ? shown.record.step : null };
    window.Plotly.react(elements[i], figure.data, figure.layout, { displayModeBar: false, responsive: false });
    remember(page.seen[v.key], figure.ids);
    if (page.autopsy) page.autopsy.wire(elements[i]);
  });
  return true;
}

function remember(seen, ids) {
  for (const id of ids) { seen.delete(id); seen.add(id); }
  for (const id of seen) { if (seen.size <= SEEN_LIMIT) break; seen.delete(id); }
}

function setLanguage(lang) {
  if (!LANGUAGES.includes(lang)) return;
  page.lang = lang;
  page.t = translator(page.table, lang);
  saveLanguage(window.localStorage, lang);
  document.body.classList.remove(...LANGUAGES.map((l) => `bs-lang-${l}`));
  document.body.classList.add(`bs-lang-${lang}`);
  page.language.set(lang);
  for (const button of document.querySelectorAll(".bs-lang button")) {
    button.setAttribute("aria-pressed", String(button.dataset.lang === lang));
  }
  if (page.replay) page.replay.refresh();
  dispatch({ type: "redraw" });
}

// The language switch (both / English / Chinese), added to the header once it exists.
function addLanguageSwitch() {
  const header = document.getElementById("bs-header");
  if (!header || header.querySelector(".bs-lang")) return !!header;
  const group = document.createElement("div");
  group.className = "bs-lang";
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", page.t("lang.label"));
  for (const lang of LANGUAGES) {
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.lang = lang;
    button.textContent = page.t(`lang.${lang}`);
    button.setAttribute("aria-pressed", String(lang === page.lang));
    button.addEventListener("click", () => setLanguage(lang));
    group.appendChild(button);
  }
  header.insertBefore(group, document.getElementById("bs-status"));
  return true;
}

function whenPresent(setup) {
  if (setup()) return;
  const observer = new MutationObserver(() => { if (setup()) observer.disconnect(); });
  observer.observe(document.documentElement, { childList: true, subtree: true });
}

function debug() {
  const { state } = page;
  const last = state.records[state.records.length - 1];
  return { connected: !!(page.telemetry && page.telemetry.connected), link: page.link,
    viewer: state.viewer, status: state.status, lastStep: last ? last.step : -1, lang: page.lang,
    requests: [...state.requests.keys()], cards: cardOrder(state.requests).map((e) => [e.request_id, e.status]),
    texts: Object.fromEntries([...state.requests].map(([rid, e]) => [rid, e.text.length])),
    seen: Object.fromEntries(Object.entries(page.seen).map(([k, v]) => [k, [...v]])),
    autopsy: page.autopsy ? page.autopsy.debug() : null, compare: page.compare ? page.compare.debug() : null };
}

async function start() {
  document.body.classList.add("dark", `bs-lang-${page.lang}`);  // Gradio set its theme before us
  page.language = startPageLanguage(document, page.lang);
  page.language.set(page.lang);
  try {
    page.table = await loadStrings();
  } catch (error) {
    console.error("batchscope: no strings table", error);
  }
  page.t = translator(page.table, page.lang);
  window.batchscope = { debug, setLanguage };
  page.autopsy = startAutopsy(document, { book: page.lanes, view: () => viewContext(null),
    until: () => (page.state.records.length ? page.state.records[page.state.records.length - 1].step : Infinity) });
  page.compare = startCompare(document, { view: () => viewContext(null) });
  page.stage = startStage(document, window, () => dispatch({ type: "redraw" }));
  page.keys = startStageKeys(document, { stage: page.stage, state: () => page.state, t: () => page.t,
    look: (until) => dispatch({ type: "look", until }) });
  whenPresent(addLanguageSwitch);
  whenPresent(() => page.stage.attach());
  whenPresent(() => page.compare.attach());
  whenPresent(() => {
    if (!document.getElementById("bs-replay")) return false;
    page.replay = startReplayBar(document, { viewer: () => page.state.viewer, t: () => page.t });
    page.replay.show(page.state.status && page.state.status.replay);
    return true;
  });
  window.addEventListener("resize", () => dispatch({ type: "redraw" }));
  page.telemetry = openTelemetry({ base: window.location.href, onMessage: dispatch,
    onLink: (kind) => { page.link = kind; scheduleDraw(); },
    env: { WebSocket: window.WebSocket, EventSource: window.EventSource, DecompressionStream: window.DecompressionStream,
      setTimeout: window.setTimeout.bind(window), clearTimeout: window.clearTimeout.bind(window) } });
}

start();
