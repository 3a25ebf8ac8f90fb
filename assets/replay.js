// Batchscope replay bar: play / pause / step / speed / scrubber over a recorded trace.
// The bar's markup comes from the page (viz/ui.py); clicks POST /replay/<action> and the
// position follows the status of every websocket message (dashboard.js "batchscope:status").
// Keys: space plays or pauses, → steps.
(() => {
  "use strict";

  let dragging = false;

  function el(id) { return document.getElementById(id); }

  async function control(action, value) {
    const query = value === undefined ? "" : `?value=${encodeURIComponent(value)}`;
    const response = await fetch(`/replay/${action}${query}`, { method: "POST" });
    if (response.ok) show(await response.json());
  }

  // The player's state, from a control's answer or from status.replay.
  function show(r) {
    const scrubber = el("bs-replay-scrubber");
    if (!scrubber || !r) return;
    scrubber.max = Math.max(r.num_iterations - 1, 0);
    if (!dragging) scrubber.value = Math.max(r.iteration, 0);
    el("bs-replay-position").textContent = r.iteration < 0
      ? `– / ${r.num_iterations}`
      : `iteration ${r.iteration + 1} / ${r.num_iterations} · step ${r.step}`;
    el("bs-replay-play").textContent = r.playing ? "⏸ Pause" : "▶ Play";
    el("bs-replay-play").dataset.playing = r.playing ? "1" : "";
    const speed = el("bs-replay-speed");
    if (document.activeElement !== speed) speed.value = String(r.speed);
  }

  document.addEventListener("batchscope:status", (e) => show(e.detail && e.detail.replay));

  document.addEventListener("click", (e) => {
    const button = e.target.closest("#bs-replay-play, #bs-replay-step");
    if (!button) return;
    if (button.id === "bs-replay-step") control("step");
    else control(button.dataset.playing ? "pause" : "play");
  });

  document.addEventListener("input", (e) => {
    if (e.target.id !== "bs-replay-scrubber") return;
    dragging = true;
    el("bs-replay-position").textContent = `→ iteration ${Number(e.target.value) + 1}`;
  });

  document.addEventListener("change", (e) => {
    if (e.target.id === "bs-replay-scrubber") {
      dragging = false;
      control("seek", e.target.value);
    } else if (e.target.id === "bs-replay-speed") {
      control("speed", e.target.value);
    }
  });

  document.addEventListener("keydown", (e) => {
    if (!el("bs-replay") || e.target.closest("input, textarea, select")) return;
    if (e.key === " ") { e.preventDefault(); el("bs-replay-play").click(); }
    if (e.key === "ArrowRight") { e.preventDefault(); control("step"); }
  });
})();
