// A panel over the page (the request autopsy, the policy compare): a modal box with a title
// row and a close button, closed by the button, Escape or a click beside it. Built with DOM
// calls only; every text in it is set with textContent by its owner.

export function element(doc, tag, className, parent, text) {
  const el = doc.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  if (parent) parent.appendChild(el);
  return el;
}

export class Panel {
  constructor(doc, id, onClose = () => {}) {
    this.doc = doc;
    this.onClose = onClose;
    this.root = element(doc, "div", "bs-panel", doc.body);
    Object.assign(this.root, { id, hidden: true });
    this.root.setAttribute("role", "dialog");
    this.root.setAttribute("aria-modal", "true");
    this.box = element(doc, "div", "bs-panel-box", this.root);
    this.head = element(doc, "div", "bs-panel-head", this.box);
    this.chip = element(doc, "span", "bs-chip", this.head);
    this.title = element(doc, "h2", "bs-panel-title", this.head);
    this.title.id = `${id}-title`;
    this.root.setAttribute("aria-labelledby", this.title.id);
    this.sub = element(doc, "span", "bs-panel-sub", this.head);
    this.closer = element(doc, "button", "bs-panel-close", this.head);
    this.closer.type = "button";
    this.body = element(doc, "div", "bs-panel-body", this.box);
    this.closer.addEventListener("click", () => this.hide());
    this.root.addEventListener("click", (e) => { if (e.target === this.root) this.hide(); });
    doc.addEventListener("keydown", (e) => { if (e.key === "Escape" && !this.root.hidden) this.hide(); });
  }

  get open() { return !this.root.hidden; }

  show() {
    if (this.open) return;
    this.returnFocus = this.doc.activeElement;
    this.root.hidden = false;
    this.doc.body.classList.add("bs-panel-open");
    this.closer.focus();
  }

  hide() {
    if (!this.open) return;
    this.root.hidden = true;
    this.doc.body.classList.remove("bs-panel-open");
    if (this.returnFocus && this.returnFocus.focus) this.returnFocus.focus();
    this.onClose();
  }

  // The close button's text: "× Close" (both languages on one line each).
  label(t) {
    this.closer.textContent = `× ${t.short("panel.close")}`;
  }
}

// A Plotly figure drawn into ``el`` at its current size, by a pure builder (size) -> figure.
export function plot(el, build) {
  const size = { width: el.clientWidth || 600, height: el.clientHeight || 240 };
  const figure = build(size);
  window.Plotly.react(el, figure.data, figure.layout, { displayModeBar: false, responsive: false });
}
