// The server's texts in the visitor's language. Gradio draws labels, buttons, the preset list,
// Markdown and warnings from texts the server wrote in both languages, each language marked with
// invisible characters (viz/ui/strings.py `bilingual`): after EN_MARK English, after ZH_MARK
// Chinese, after JOINT_MARK the " · " shown only with both, after END_MARK every language.
// Here each such text is shown in the chosen language and its marks dropped. A language run may
// span several text nodes (Markdown's **bold**), so a container's text nodes are read in order
// with the run carried from one to the next. The text as written is kept per node: a switch
// shows it again in another language, and a node the page writes anew is taken as written.
// The views and the cards (drawn by our own scripts from the strings table) are left alone.

const EN_MARK = "\u2062", ZH_MARK = "\u2063", JOINT_MARK = "\u2064", END_MARK = "\u2061";
const MARKS = /[\u2061-\u2064]/;
const ATTRIBUTES = ["placeholder", "aria-label", "title"];
const OWN_VIEWS = "#bs-views-wrap, #bs-texts-wrap";
const CONTAINER = ".block, .toast-body, [role=listbox], button, label";

// ``text`` as shown in ``lang``, read from inside the run ``mark``: {text, mark} (the run it ends in).
export function localize(text, lang, mark = END_MARK) {
  let shown = "";
  for (const ch of text) {
    if (MARKS.test(ch)) mark = ch;
    else if (shows(mark, lang)) shown += ch;
  }
  return { text: shown, mark };
}

function shows(mark, lang) {
  if (mark === END_MARK || lang === "both") return true;
  return (mark === EN_MARK && lang === "en") || (mark === ZH_MARK && lang === "zh");
}

// What a node, an attribute or a value says as written, and as last shown by us.
class Written {
  constructor() { this.entries = new WeakMap(); }

  // The text as written, given what is there now (null: not ours to change).
  source(owner, name, now, inRun) {
    const entry = (this.entries.get(owner) || {})[name];
    if (entry && entry.shown === now) return entry.written;
    return MARKS.test(now) || inRun ? now : null;
  }

  // Show ``text`` (written as ``written``) through ``put`` unless it is there already.
  show(owner, name, written, text, now, put) {
    const entries = this.entries.get(owner) || {};
    entries[name] = { written, shown: text };
    this.entries.set(owner, entries);
    if (now !== text) put(text);
  }
}

export function startPageLanguage(doc, lang) {
  const written = new Written();
  const language = { lang };

  const renderNode = (node, mark) => {
    const source = written.source(node, "data", node.data, mark !== END_MARK);
    if (source === null) return mark;
    const out = localize(source, language.lang, mark);
    written.show(node, "data", source, out.text, node.data, (text) => { node.data = text; });
    const parent = node.parentElement;  // an element left with no text (Markdown's `code`, a paragraph) is not drawn
    if (parent) parent.classList.toggle("bs-lang-empty", parent.textContent === "");
    return out.mark;
  };
  const renderValue = (el, name, now, put) => {
    const source = written.source(el, name, now, false);
    if (source !== null) written.show(el, name, source, localize(source, language.lang).text, now, put);
  };
  const renderElement = (el) => {
    for (const name of ATTRIBUTES) {
      if (el.hasAttribute(name)) renderValue(el, name, el.getAttribute(name), (text) => el.setAttribute(name, text));
    }
    if (el.tagName === "INPUT" && el.type === "text") renderValue(el, "value", el.value, (text) => { el.value = text; });
  };
  const render = (root) => {
    const walker = doc.createTreeWalker(root, 1 | 4);  // elements and text
    let mark = END_MARK;
    for (let node = root; node; node = walker.nextNode()) {
      if (node.nodeType === 3) mark = renderNode(node, mark);
      else renderElement(node);
    }
  };
  const changed = (mutations) => {
    const roots = new Set();
    for (const m of mutations) {
      const el = m.target.nodeType === 1 ? m.target : m.target.parentElement;
      if (!el || el.closest(OWN_VIEWS)) continue;
      roots.add(el.closest(CONTAINER) || el);
    }
    for (const root of roots) render(root);
    if (MARKS.test(doc.title) || written.source(doc, "title", doc.title, false) !== null) {
      renderValue(doc, "title", doc.title, (text) => { doc.title = text; });
    }
  };
  const observer = new MutationObserver(changed);
  observer.observe(doc.body, { subtree: true, childList: true, characterData: true, attributes: true,
    attributeFilter: ATTRIBUTES });
  return {
    set(lang) {
      language.lang = lang;
      render(doc.body);
      changed([]);
    },
  };
}
