// The replay bar (replay mode): play / pause / step / speed / scrubber over a recorded trace.
// Each viewer has its own playback: every control is POST /replay/<action>?viewer=ID and acts on
// this page's viewer only; the answer and status.replay give its position. The bar's markup
// comes from the page (viz/ui.py); its texts and icons are set here. Keys: space plays or
// pauses, → steps.
import { icon } from "./icons.js";

export function replayPosition(r, t) {
  if (!r) return "";
  return r.iteration < 0 ? t("replay.none", { n: r.num_iterations })
    : t("replay.position", { i: r.iteration + 1, n: r.num_iterations, step: r.step });
}

export function startReplayBar(doc, { viewer, t, fetchImpl = (url, init) => fetch(url, init) }) {
  const bar = new ReplayBar(doc, viewer, t, fetchImpl);
  listen(doc, bar);
  return bar;
}

class ReplayBar {
  constructor(doc, viewer, t, fetchImpl) {
    Object.assign(this, { doc, viewer, t, fetchImpl, dragging: false, last: null });
  }

  el(id) { return this.doc.getElementById(id); }

  async control(action, value) {
    const query = new URLSearchParams();
    if (this.viewer()) query.set("viewer", this.viewer());
    if (value !== undefined) query.set("value", String(value));
    const response = await this.fetchImpl(`/replay/${action}?${query}`, { method: "POST" });
    if (response.ok) this.show(await response.json());
  }

  // The player's state, from a control's answer or from status.replay.
  show(r) {
    const scrubber = this.el("bs-replay-scrubber");
    if (!scrubber || !r) return;
    this.last = r;
    scrubber.max = Math.max(r.num_iterations - 1, 0);
    if (!this.dragging) scrubber.value = Math.max(r.iteration, 0);
    this.el("bs-replay-position").textContent = replayPosition(r, this.t());
    const play = this.el("bs-replay-play");
    this.label(play, r.playing ? "pause" : "play", r.playing ? "replay.pause" : "replay.play");
    play.dataset.playing = r.playing ? "1" : "";
    this.label(this.el("bs-replay-step"), "step", "replay.step");
    const speed = this.el("bs-replay-speed");
    if (speed && this.doc.activeElement !== speed) speed.value = String(r.speed);
  }

  refresh() { this.show(this.last); }

  label(button, name, key) {
    const span = this.doc.createElement("span");
    span.className = "bs-button-label";
    span.textContent = this.t().parts(key).join("\n");  // "both": one language per line
    button.replaceChildren(icon(name), span);
  }

  seeking(value) {
    this.dragging = true;
    this.el("bs-replay-position").textContent = this.t()("replay.seeking", { i: Number(value) + 1 });
  }
}

function listen(doc, bar) {
  doc.addEventListener("click", (e) => {
    const button = e.target.closest("#bs-replay-play, #bs-replay-step");
    if (!button) return;
    if (button.id === "bs-replay-step") bar.control("step");
    else bar.control(button.dataset.playing ? "pause" : "play");
  });
  doc.addEventListener("input", (e) => { if (e.target.id === "bs-replay-scrubber") bar.seeking(e.target.value); });
  doc.addEventListener("change", (e) => {
    if (e.target.id === "bs-replay-scrubber") {
      bar.dragging = false;
      bar.control("seek", e.target.value);
    } else if (e.target.id === "bs-replay-speed") {
      bar.control("speed", e.target.value);
    }
  });
  doc.addEventListener("keydown", (e) => {
    if (!bar.el("bs-replay") || e.target.closest("input, textarea, select")) return;
    if (e.key === " ") { e.preventDefault(); bar.el("bs-replay-play").click(); }
    if (e.key === "ArrowRight") { e.preventDefault(); bar.control("step"); }
  });
}
