// The stage layout, for a projector: ``?layout=stage`` in the URL or the header's toggle. The four
// views in two rows fill the screen below the header; the presenter's few controls (the
// workload, Fire, pause / step / resume, slow motion, the keys: stage_keys.js) and the request
// cards share a rail beside them; chart text is at least STAGE_TEXT_PX (the figure builders'
// minText). The layout itself is assets/stage.css under body.bs-stage. This module switches it,
// keeps the URL saying it (a reload or a shared link opens the same layout), measures where
// the stage starts below the header (--bs-stage-top), which wraps to the width it has, and has
// the views drawn again whenever their boxes change size (a toggle, the header wrapping, a
// scroll bar coming or going: no window resize tells of those).
import { VIEWS } from "./figures/index.js";

export const STAGE_TEXT_PX = 14;
const PARAM = "layout", STAGE = "stage";

export function stageInUrl(href) {
  return new URL(href).searchParams.get(PARAM) === STAGE;
}

// ``href`` with the stage layout asked for (or not), every other parameter kept.
export function stageUrl(href, on) {
  const url = new URL(href);
  if (on) url.searchParams.set(PARAM, STAGE);
  else url.searchParams.delete(PARAM);
  return url.toString();
}

// ``changed()`` whenever one of ``elements`` changes size (not for the sizes they start with: the
// first drawing measures those).
function watchSizes(win, elements, changed) {
  const sizes = new Map();
  const observer = new win.ResizeObserver((entries) => {
    const resized = entries.filter(({ target, contentRect }) => {
      const before = sizes.get(target), now = `${contentRect.width}x${contentRect.height}`;
      sizes.set(target, now);
      return before !== undefined && before !== now;
    });
    if (resized.length) changed();
  });
  elements.forEach((element) => observer.observe(element));
}

// ``onChange()``: the views must be drawn again (their sizes or their text sizes changed).
export function startStage(doc, win, onChange) {
  return new Stage(doc, win, onChange);
}

class Stage {
  constructor(doc, win, onChange) {
    Object.assign(this, { doc, win, onChange, on: stageInUrl(win.location.href), button: null, top: null });
    win.addEventListener("resize", () => this.fit());
    this.apply();
  }

  get minText() { return this.on ? STAGE_TEXT_PX : 0; }

  // The toggle, added to the header, and the watch on the sizes, once the header and the views
  // exist (false until then).
  attach() {
    const header = this.doc.getElementById("bs-header");
    const plots = header ? VIEWS.map((v) => this.doc.getElementById(v.id)) : [null];
    if (plots.some((plot) => !plot)) return false;
    this.button = this.doc.createElement("button");
    Object.assign(this.button, { type: "button", id: "bs-stage-toggle", className: "bs-stage-toggle" });
    this.button.addEventListener("click", () => this.toggle());
    header.insertBefore(this.button, this.doc.getElementById("bs-status"));
    new this.win.ResizeObserver(() => this.fit()).observe(header);
    watchSizes(this.win, plots, () => this.onChange());
    this.apply();
    return true;
  }

  toggle() {
    this.on = !this.on;
    this.win.history.replaceState(this.win.history.state, "", stageUrl(this.win.location.href, this.on));
    this.apply();
    this.onChange();
  }

  apply() {
    this.doc.body.classList.toggle("bs-stage", this.on);
    if (this.button) this.button.setAttribute("aria-pressed", String(this.on));
    this.fit();
  }

  // The stage's top: just below the header, however many lines it wraps to.
  fit() {
    const header = this.doc.getElementById("bs-header-wrap");
    if (!header) return;
    const top = Math.ceil(header.getBoundingClientRect().bottom + this.win.scrollY);
    if (top === this.top) return;
    this.top = top;
    this.doc.documentElement.style.setProperty("--bs-stage-top", `${top}px`);
  }

  label(t) {
    if (!this.button) return;
    const text = t("stage.toggle"), title = t("stage.toggle_title");
    if (this.button.textContent !== text) this.button.textContent = text;
    if (this.button.title !== title) this.button.title = title;
  }
}
