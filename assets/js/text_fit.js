// Fitting view text into the pixels it has. Plotly neither wraps nor clips annotations and
// axis titles: a long title simply runs off the figure. So every long text is laid out here,
// from its width estimated with the advance widths of DejaVu Sans (the project's Latin font,
// measured in Chromium; CJK characters are 1 em in WenQuanYi Micro Hei), rounded up and given
// 5% to spare so the estimate errs wide: parts are wrapped onto lines, and what still does not
// fit is cut with "…" while the whole text goes to a hover.

const EM_GROUPS = [
  [0.29, "'ijlIJ"], [0.32, " ,.\u00b7"], [0.34, ":;/\\|"], [0.36, "-"], [0.39, "()[]t"], [0.41, "!r"],
  [0.46, '"'], [0.5, "*_`\u2013\u25b8\u25be"], [0.53, "sz?"], [0.55, "c"], [0.56, "L"], [0.59, "kvxyF"],
  [0.61, "PTYao\u2501\u2504"], [0.64, "eEbdghnpqu$S{}0123456789"], [0.7, "KABRXZCV"], [0.79, "UHNDGOQ&"],
  [0.84, "w#+<=>^~\u00d7\u2192"], [0.87, "M\u25cf"], [1.0, "%@W\u25a0\u25a1\u2026m"],
];
const EM = new Map(EM_GROUPS.flatMap(([em, chars]) => [...chars].map((ch) => [ch, em])));
const WIDE = /[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]/u;
const SPARE = 1.05;

// The text a viewer reads in a Plotly string: tags dropped, entities decoded.
export function plainText(html) {
  return String(html).replace(/<br\s*\/?>/gi, " ").replace(/<[^>]*>/g, "")
    .replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, "\"").replace(/&amp;/g, "&");
}

// Estimated width in pixels of ``html`` drawn at ``size`` px.
export function textWidth(html, size) {
  let em = 0;
  for (const ch of plainText(html)) em += EM.get(ch) ?? (WIDE.test(ch) ? 1.0 : 0.7);
  return em * size * SPARE;
}

// ``parts`` (Plotly HTML strings, or {text, before, lead}: joined with ``before`` instead of
// ``separator``, and led by ``lead`` when it starts a line) wrapped into at most ``maxLines``
// lines of at most ``width`` px; a plain part wider than a whole line breaks at its spaces.
// Returns {text, lines, hover}: ``hover`` is the whole plain text when something had to be cut.
export function fitParts(parts, { width, size, separator = " · ", maxLines = 2 }) {
  const items = parts.filter(Boolean).map((p) => (typeof p === "string" ? { text: p, before: separator } : p))
    .flatMap((item) => words(item, width, size));
  const lines = [];
  let current = "";
  for (const { text, before, lead = "" } of items) {
    const joined = current ? current + before + text : text;
    if (!current || textWidth(joined, size) <= width) current = joined;
    else { lines.push(current); current = lead + text; }
  }
  if (current) lines.push(current);
  const whole = plainText(items.map((p, i) => (i ? p.before : "") + p.text).join(""));
  let cut = lines.length > maxLines;
  const kept = lines.slice(0, maxLines).map((line) => {
    if (textWidth(line, size) <= width) return line;
    cut = true;
    return shorten(line, width, size);
  });
  if (lines.length > maxLines) kept[kept.length - 1] = shorten(`${kept[kept.length - 1]} …`, width, size);
  return { text: kept.join("<br>"), lines: kept.length, hover: cut ? whole : null };
}

// ``item`` as it is, or as its words when it is plain text wider than ``width`` px.
function words(item, width, size) {
  if (item.text.includes("<") || !item.text.includes(" ") || textWidth(item.text, size) <= width) return [item];
  return item.text.split(" ").map((text, i) => (i ? { text, before: " " } : { ...item, text }));
}

// One line of at most ``width`` px: the plain text cut with "…" (markup is dropped, then
// re-escaped, when a line has to be cut).
export function shorten(html, width, size) {
  if (textWidth(html, size) <= width) return html;
  let text = plainText(html);
  while (text.length > 1 && textWidth(`${text}…`, size) > width) text = text.slice(0, -1);
  return escapeText(`${text.trimEnd()}…`);
}

// Plotly renders a few HTML-like tags in text: escape anything user-given before it goes in.
export function escapeText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}
