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

export function startReplayBar(doc, { viewer, t, fetchImpl = fetch }) {
  const el = (id) => doc.getElementById(id);
  let dragging = false, last = null;

  async function control(action, value) {
    const query = new URLSearchParams();
    if (viewer()) query.set("viewer", viewer());
    if (value !== undefined) query.set("value", String(value));
    const response = await fetchImpl(`/replay/${action}?${query}`, { method: "POST" });
    if (response.ok) show(await response.json());
  }

  function label(button, name, key) {
    const span = doc.createElement("span");
    span.className = "bs-button-label";
    span.textContent = t().parts(key).join("\n");  // "both": one language per line
    button.replaceChildren(icon(name), span);
  }

  function show(r) {
    const scrubber = el("bs-replay-scrubber");
    if (!scrubber || !r) return;
    last = r;
    scrubber.max = Math.max(r.num_iterations - 1, 0);
    if (!dragging) scrubber.value = Math.max(r.iteration, 0);
    el("bs-replay-position").textContent = replayPosition(r, t());
    const play = el("bs-replay-play");
    label(play, r.playing ? "pause" : "play", r.playing ? "replay.pause" : "replay.play");
    play.dataset.playing = r.playing ? "1" : "";
    label(el("bs-replay-step"), "step", "replay.step");
    const speed = el("bs-replay-speed");
    if (speed && doc.activeElement !== speed) speed.value = String(r.speed);
  }

  doc.addEventListener("click", (e) => {
    const button = e.target.closest("#bs-replay-play, #bs-replay-step");
    if (!button) return;
    if (button.id === "bs-replay-step") control("step");
    else control(button.dataset.playing ? "pause" : "play");
  });
  doc.addEventListener("input", (e) => {
    if (e.target.id !== "bs-replay-scrubber") return;
    dragging = true;
    el("bs-replay-position").textContent = t()("replay.seeking", { i: Number(e.target.value) + 1 });
  });
  doc.addEventListener("change", (e) => {
    if (e.target.id === "bs-replay-scrubber") {
      dragging = false;
      control("seek", e.target.value);
    } else if (e.target.id === "bs-replay-speed") {
      control("speed", e.target.value);
    }
  });
  doc.addEventListener("keydown", (e) => {
    if (!el("bs-replay") || e.target.closest("input, textarea, select")) return;
    if (e.key === " ") { e.preventDefault(); el("bs-replay-play").click(); }
    if (e.key === "ArrowRight") { e.preventDefault(); control("step"); }
  });
  return { show, refresh: () => show(last) };
}
