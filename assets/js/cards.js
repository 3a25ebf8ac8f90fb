// One text card per request: id, state badge, TTFT / inter-token latency, the prompt (the whole
// of it, scrollable, expandable) and the generated text. Other visitors' requests show their
// lengths only. Every user-provided or generated string is set with textContent.
import { icon } from "./icons.js";
import { localize } from "./page_language.js";
import { addSolo, fillSolo, offersSoloCheck } from "./solo.js";

export const MAX_CARDS = 40;
const LONG_PROMPT_CHARS = 240, LONG_PROMPT_LINES = 3;

// What one card shows, as plain strings (pure; tested in node). ``status``: the hub's (its counts
// say why a request in the engine's queue waits).
export function cardView(entry, t, status = null) {
  const visible = !!entry.visible;
  // A label the page wrote for a prompt ("100-token prompt") comes in both languages, marked.
  const prompt = visible ? localize(entry.label || entry.prompt || "", t.lang).text : t("card.hidden_prompt");
  return {
    state: entry.status || "pending", badge: badge(entry, t), why: why(entry, t, status),
    metrics: metrics(entry, t), mine: !!entry.mine,
    visible, prompt, longPrompt: visible && (prompt.length > LONG_PROMPT_CHARS ||
      prompt.split("\n").length > LONG_PROMPT_LINES),
    text: visible ? entry.text + (entry.error ? `\n[${t("card.error", { error: entry.error })}]` : "")
      : t("card.hidden_text", { prompt: entry.num_prompt_tokens || "?", output: entry.num_output_tokens || 0 }),
  };
}

function badge(entry, t) {
  const p = entry.progress;
  if (entry.status === "finished") {
    const reason = entry.finish_reason || "stop";
    return t("state.finished", { reason: t.has(`reason.${reason}`) ? t.pair(`reason.${reason}`) : reason });
  }
  if (entry.status === "prefilling" && p) {
    return t("state.prefilling_n", { done: p.num_computed_tokens, target: p.prefill_target });
  }
  return t(`state.${entry.status || "pending"}`);
}

// Why a waiting card waits: its place in the page's turns (viz/ui/fair_queue.py: a ``fired``
// event's ``queue``), or the engine busy with the running ones. "" for the others.
function why(entry, t, status) {
  const q = entry.queue;
  if ((entry.status || "pending") === "pending" && q) {
    const place = { en: ordinal(q.place), zh: q.place };
    if (!q.visitors_ahead) return t("card.in_line", { place });
    return t(q.visitors_ahead === 1 ? "card.in_line_behind_one" : "card.in_line_behind", { place, ahead: q.visitors_ahead });
  }
  const running = status && status.counts ? status.counts.running : null;
  return entry.status === "waiting" && running != null ? t("card.engine_busy", { running }) : "";
}

function ordinal(n) {
  const suffix = n % 100 >= 11 && n % 100 <= 13 ? "th" : { 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th";
  return `${n}${suffix}`;
}

function metrics(entry, t) {
  const parts = [];
  if (entry.first_token && entry.arrival) parts.push(`${t.short("card.ttft")} ${duration(entry.first_token - entry.arrival)}`);
  if (entry.num_output_tokens > 1 && entry.last_token > entry.first_token) {
    const itl = (entry.last_token - entry.first_token) / (entry.num_output_tokens - 1);
    parts.push(`${t.short("card.itl")} ${duration(itl)}`);
  }
  parts.push(`${entry.num_prompt_tokens || 0} → ${entry.num_output_tokens || 0} ${t.short("card.tokens")}`);
  return parts.join(" · ");
}

export function duration(seconds) {
  return seconds >= 10 ? `${seconds.toFixed(1)} s` : `${Math.round(seconds * 1000)} ms`;
}

// Live requests first (oldest first), then the finished ones (latest first), at most MAX_CARDS.
export function cardOrder(requests) {
  const entries = [...requests.values()];
  return [...entries.filter((e) => e.status !== "finished"),
    ...entries.filter((e) => e.status === "finished").reverse()].slice(0, MAX_CARDS);
}

// What the list says under its last card when it shows fewer cards than the page knows ("" if none).
export function hiddenCardsNote(requests, t) {
  const hidden = requests.size - MAX_CARDS;
  if (hidden <= 0) return "";
  return t(hidden === 1 ? "cards.hidden_one" : "cards.hidden", { count: hidden, shown: MAX_CARDS });
}

// Bring the cards under ``root`` in line with the state: fill the dirty ones (and the waiting
// ones, whose reason follows the status), add, drop, order.
// Finished cards of Batchscope's own live engine offer the solo check (solo.js): a replay has no
// engine, and an attached vLLM is not ours to re-run.
export function renderCards(root, state, t, colorOf) {
  const order = cardOrder(state.requests);
  const live = offersSoloCheck(state.status);
  const existing = new Map([...root.querySelectorAll(":scope > .bs-req")].map((card) => [card.dataset.rid, card]));
  order.forEach((entry, i) => {
    let card = existing.get(entry.request_id);
    const fresh = !card;
    if (fresh) card = makeCard(entry.request_id);
    if (fresh || state.dirty.all || state.dirty.cards.has(entry.request_id) || entry.status === "waiting") {
      fillCard(card, cardView(entry, t, state.status), colorOf(entry.request_id), t);
      fillSolo(card, entry, t, live);
    }
    if (root.children[i] !== card) root.insertBefore(card, root.children[i] || null);
  });
  const keep = new Set(order.map((e) => e.request_id));
  for (const [rid, card] of existing) if (!keep.has(rid)) card.remove();
  showHiddenNote(root, hiddenCardsNote(state.requests, t));
}

function showHiddenNote(root, text) {
  let note = root.querySelector(":scope > .bs-cards-hidden");
  if (!text) {
    if (note) note.remove();
    return;
  }
  note = note || element("p", "bs-cards-hidden");
  note.textContent = text;
  if (root.lastElementChild !== note) root.appendChild(note);  // (after the last card)
}

function element(tag, className, parent) {
  const el = document.createElement(tag);
  el.className = className;
  if (parent) parent.appendChild(el);
  return el;
}

function makeCard(rid) {
  const card = element("div", "bs-req");
  card.dataset.rid = rid;
  const head = element("div", "bs-req-head", card);
  for (const cls of ["bs-chip", "bs-rid", "bs-mine-badge", "bs-state", "bs-metrics"]) element("span", cls, head);
  const body = element("div", "bs-req-prompt-row", card);
  element("span", "bs-lock", body).appendChild(icon("lock"));
  element("div", "bs-req-prompt", body);
  const more = element("button", "bs-req-more", card);
  more.type = "button";
  more.addEventListener("click", () => {
    card.classList.toggle("bs-open");
    more.textContent = card.classList.contains("bs-open") ? more.dataset.less : more.dataset.more;
  });
  element("div", "bs-req-text", card);
  addSolo(card);
  return card;
}

function fillCard(card, view, color, t) {
  card.style.setProperty("--req-color", color);
  card.classList.toggle("bs-mine", view.mine);
  card.classList.toggle("bs-hidden-text", !view.visible);
  card.dataset.state = view.state;
  card.querySelector(".bs-rid").textContent = card.dataset.rid;
  card.querySelector(".bs-mine-badge").textContent = view.mine ? t("card.mine") : "";
  card.querySelector(".bs-state").textContent = view.badge;
  card.querySelector(".bs-metrics").textContent = view.why ? `${view.why} · ${view.metrics}` : view.metrics;
  card.querySelector(".bs-req-prompt").textContent = view.prompt;
  const more = card.querySelector(".bs-req-more");
  more.hidden = !view.longPrompt;
  more.dataset.more = t("card.more");
  more.dataset.less = t("card.less");
  more.textContent = card.classList.contains("bs-open") ? more.dataset.less : more.dataset.more;
  card.querySelector(".bs-req-text").textContent = view.text;
}
