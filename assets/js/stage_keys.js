// The presenter's keys in the stage layout (stage.js): space pauses or resumes the engine, →
// steps it (looking back, it goes one step forward in the history instead), ← shows the step
// before the one shown while paused (look_back.js), F fires, S and P take the focus to the
// slow-motion number and the preset list (arrows or typing, then Escape: the number is sent as it
// loses the focus, and the keys are the stage's again). Pause, step, resume and Fire click
// the page's own buttons, so a key goes through the same server controls as a click, behind the
// same presenter key. The keys are said on screen under those buttons (#bs-stage-keys, from the
// page), and so is why a key did nothing: no presenter key typed yet, or not paused.
import { earlierStep, laterStep, viewedHistory } from "./look_back.js";

const BUTTONS = { pause: "bs-pause", resume: "bs-resume", step: "bs-step", fire: "bs-fire" };
const FIELDS = { slow: "#bs-slow input[type=number]", preset: "#bs-controls input[role=combobox]" };
const FIELD_KEYS = { s: "slow", p: "preset" };
const NOTE_MS = 5000;  // how long the page says why a key did nothing

// What a key does: a button to click, "earlier" / "later" in the history, "key_needed" or
// "pause_first" (said, nothing done), or null (not a stage key). ``keyTyped``: false when the
// page has a presenter key box and it is empty.
export function keyAction(key, { paused, lookingBack, keyTyped }) {
  if (key === "f" || key === "F") return "fire";
  if (FIELD_KEYS[key.toLowerCase()]) return FIELD_KEYS[key.toLowerCase()];
  if (key === "ArrowLeft") return paused ? "earlier" : "pause_first";
  if (key === "ArrowRight" && lookingBack) return "later";
  const control = key === " " ? (paused ? "resume" : "pause") : key === "ArrowRight" ? "step" : null;
  return control && !keyTyped ? "key_needed" : control;
}

export function startStageKeys(doc, { stage, state, look, t, win = window }) {
  const keys = new StageKeys(doc, { stage, state, look, t, win });
  doc.addEventListener("keydown", (e) => keys.keydown(e));
  doc.addEventListener("keydown", (e) => keys.leaveField(e));
  // a focused button (Fire, after a click) is pressed on space's keyup: space is the stage's
  doc.addEventListener("keyup", (e) => { if (e.key === " " && keys.listening(e)) e.preventDefault(); });
  return keys;
}

class StageKeys {
  constructor(doc, env) {
    Object.assign(this, { doc, ...env, note: null });
  }

  // Whether a key pressed here is the stage's: not while typing, in a panel or in a replay.
  listening(e) {
    return this.stage.on && !e.ctrlKey && !e.altKey && !e.metaKey && !this.doc.getElementById("bs-replay")
      && !this.doc.body.classList.contains("bs-panel-open")
      && !(e.target.closest && e.target.closest("input, textarea, select, [contenteditable]"));
  }

  keydown(e) {
    if (!this.listening(e)) return;
    const state = this.state();
    const action = keyAction(e.key, { paused: !!(state.status && state.status.paused),
      lookingBack: state.until != null, keyTyped: this.keyTyped() });
    if (!action) return;
    e.preventDefault();
    this.act(action, state);
  }

  act(action, state) {
    this.note = null;
    if (action === "earlier") this.look(earlierStep(state));
    else if (action === "later") this.look(laterStep(state));
    else if (BUTTONS[action]) this.click(BUTTONS[action]);
    else if (FIELDS[action]) this.focus(FIELDS[action]);
    else this.say(action);
  }

  focus(selector) {
    const field = this.doc.querySelector(selector);
    if (field) field.focus();
  }

  // Escape in the slow-motion slider or the preset list: the keys are the stage's again.
  leaveField(e) {
    if (e.key !== "Escape" || !this.stage.on || !e.target.matches) return;
    if (Object.values(FIELDS).some((selector) => e.target.matches(selector))) e.target.blur();
  }

  click(id) {
    const button = this.doc.getElementById(id);
    if (button) button.click();
  }

  // A presenter key box on the page (a server started with --presenter-key) that is empty.
  keyBox() {
    const box = this.doc.querySelector("#bs-key input");
    return box && box.checkVisibility() ? box : null;
  }

  keyTyped() {
    const box = this.keyBox();
    return !box || !!box.value;
  }

  say(action) {
    this.note = { text: () => this.t()(action === "key_needed" ? "stage.key_needed" : "stage.pause_first"),
      until: Date.now() + NOTE_MS };
    if (action === "key_needed") this.keyBox().focus();
    this.show(this.state());
    this.win.setTimeout(() => this.show(this.state()), NOTE_MS + 50);
  }

  // The keys, and what the views show when it is not the newest step (or why a key did nothing).
  show(state) {
    const root = this.doc.getElementById("bs-stage-keys");
    if (!root) return;
    const t = this.t();
    const lines = [t.parts("stage.keys").join("\n"), this.noteText(state, t)];
    const text = lines.filter(Boolean).join("\n");
    if (root.textContent !== text) root.textContent = text;
    root.classList.toggle("bs-stage-looking", state.until != null);
  }

  noteText(state, t) {
    if (this.note && Date.now() < this.note.until) return this.note.text();
    if (state.until == null) return "";
    const shown = viewedHistory(state).shown.record, newest = state.shown.record;
    return shown && newest ? t("stage.looking_back", { step: shown.step, newest: newest.step }) : "";
  }
}
