// What Plotly really drew in a view, for the browser tests: its full layout and data (after
// Plotly's defaults) and the pixel boxes of the SVG it rendered; and the page's own text that
// does not fit its box. Read-only.
function box(el) {
  const r = el.getBoundingClientRect();
  return { left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height };
}

function plain(values) {
  return values === undefined || values === null ? null : Array.from(values);
}

function figureOf(id) {
  const gd = document.getElementById(id);
  return gd && gd._fullLayout && gd._fullData && gd.querySelector(".main-svg") ? gd : null;
}

function axes(gd) {
  const out = {};
  for (const [key, ax] of Object.entries(gd._fullLayout)) {
    if (!/^[xy]axis\d*$/.test(key) || !ax || !ax.range) continue;
    out[ax._id] = { range: plain(ax.range), offset: ax._offset, length: ax._length, type: ax.type,
      title: ax.title ? ax.title.text : "", ticktext: plain(ax.ticktext), tickvals: plain(ax.tickvals) };
  }
  return out;
}

// Pixel boxes of each trace's drawn points, by trace index.
function pointBoxes(gd, selector) {
  const boxes = {};
  for (const g of gd.querySelectorAll(selector)) {
    const cd = g.__data__;
    const trace = cd && cd[0] && cd[0].trace;
    if (trace) boxes[trace.index] = [...g.querySelectorAll("path")].map(box);
  }
  return boxes;
}

function traces(gd, boxes) {
  return gd._fullData.map((t) => ({
    index: t.index, type: t.type, name: t.name, orientation: t.orientation || null,
    xaxis: t.xaxis, yaxis: t.yaxis, x: plain(t.x), y: plain(t.y), base: plain(t.base),
    text: t.text === undefined ? null : JSON.parse(JSON.stringify(t.text)),
    z: t.z ? JSON.parse(JSON.stringify(t.z)) : null, meta: t.meta === undefined ? null : t.meta,
    visible: t.visible, boxes: boxes[t.index] || [],
  }));
}

function annotations(gd) {
  return [...gd.querySelectorAll(".annotation")].map((el) => {
    const textEl = el.querySelector(".annotation-text-g") || el;
    return { index: Number(el.getAttribute("data-index")), text: textEl.textContent, box: box(textEl) };
  });
}

function tickLabels(gd) {
  return [...gd.querySelectorAll(".xtick text, .ytick text")].map((el) => ({
    axis: el.closest("[class*='tick']").getAttribute("class"), text: el.textContent, box: box(el),
  }));
}

function axisTitles(gd) {
  return [...gd.querySelectorAll("[class^='g-x'] text, [class^='g-y'] text")]
    .map((el) => ({ cls: el.getAttribute("class"), text: el.textContent, box: box(el) }));
}

function drawnFigure(id) {
  const gd = figureOf(id);
  if (!gd) return null;
  const boxes = pointBoxes(gd, "g.trace");
  return { svg: box(gd.querySelector(".main-svg")), axes: axes(gd), traces: traces(gd, boxes),
    annotations: annotations(gd), ticks: tickLabels(gd), titles: axisTitles(gd),
    layoutMeta: gd._fullLayout.meta === undefined ? null : gd._fullLayout.meta };
}

// Every text Plotly drew in a figure that a viewer reads as a label: annotations, tick labels,
// axis titles and legend entries, with their boxes (for overlap and clipping checks).
function drawnTexts(id) {
  const gd = figureOf(id);
  if (!gd) return null;
  const pick = (selector, kind) => [...gd.querySelectorAll(selector)]
    .filter((el) => el.textContent.trim() && el.getBoundingClientRect().width > 0)
    .map((el) => ({ kind, text: el.textContent, box: box(el) }));
  return { svg: box(gd.querySelector(".main-svg")), texts: [
    ...pick(".annotation-text-g", "annotation"), ...pick(".xtick text, .ytick text", "tick"),
    ...pick(".g-xtitle text, .g-x2title text, .g-x3title text, .g-ytitle text, .g-y2title text, .g-y3title text", "axis title"),
    ...pick(".legend .legendtext", "legend")] };
}

// Whether every view is drawn at its element's current size (after a resize).
function drawnToSize(ids) {
  return ids.every((id) => {
    const gd = figureOf(id);
    return gd && Math.abs(gd._fullLayout.width - gd.clientWidth) <= 1 && Math.abs(gd._fullLayout.height - gd.clientHeight) <= 1;
  });
}

// The step each view draws (layout.meta.step, set by js/main.js), or null.
function drawnSteps(ids) {
  return ids.map((id) => { const gd = figureOf(id); return gd && gd._fullLayout.meta ? gd._fullLayout.meta.step : null; });
}

// Page text outside the figures that a viewer cannot read whole: an element whose own text is
// wider (or taller) than the box that clips it, or an input whose value runs past its box or
// under an icon drawn over it (a dropdown's arrow). Scrollable boxes (overflow auto / scroll)
// and line-clamped previews with a "more" button are meant to hold more than they show.
function clippedPageTexts() {
  const out = [];
  for (const el of document.querySelectorAll("body *")) {
    if (el.closest(".js-plotly-plot, svg") || !shownBox(el)) continue;
    const clipped = el.tagName === "INPUT" ? clippedInput(el) : clippedText(el);
    if (clipped) out.push({ tag: el.tagName, id: el.id, cls: String(el.className), ...clipped });
  }
  return out;
}

// Whether a viewer can see ``el`` at all (screen-reader-only text is a 1 px box).
function shownBox(el) {
  const r = el.getBoundingClientRect();
  return r.width > 1 && r.height > 1 && getComputedStyle(el).visibility !== "hidden";
}

function ownText(el) {
  return [...el.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent).join("").trim();
}

function clippedText(el) {
  const text = ownText(el);
  if (!text) return null;
  const style = getComputedStyle(el);
  const clips = (overflow) => overflow === "hidden" || overflow === "clip";
  const wide = clips(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
  const tall = clips(style.overflowY) && style.webkitLineClamp === "none" && el.scrollHeight > el.clientHeight + 1;
  return wide || tall ? { text, shown: [el.clientWidth, el.clientHeight], needs: [el.scrollWidth, el.scrollHeight] } : null;
}

// An input's value against the width it has: its content box, up to the first element drawn
// over its right part (an absolutely placed sibling such as a dropdown's arrow).
function clippedInput(el) {
  if (!["text", "number", "search"].includes(el.type) || !el.value) return null;
  const style = getComputedStyle(el);
  const context = document.createElement("canvas").getContext("2d");
  context.font = style.font;
  const r = el.getBoundingClientRect();
  const start = r.left + el.clientLeft + parseFloat(style.paddingLeft);
  let end = r.left + el.clientLeft + el.clientWidth - parseFloat(style.paddingRight);
  for (const other of el.parentElement.querySelectorAll("*")) {
    const o = other.getBoundingClientRect();
    if (other !== el && shownBox(other) && o.left > start && o.left < end && o.top < r.bottom && o.bottom > r.top) end = o.left;
  }
  const needs = context.measureText(el.value).width;
  return needs > end - start + 1 ? { text: el.value, shown: [Math.round(end - start)], needs: [Math.round(needs)] } : null;
}

// Every text a view drew, with its font size in px as drawn (the smallest of its own and its
// spans'): [[text, px]]. Hidden texts (a bar too narrow for its label) are not drawn.
function drawnTextSizes(id) {
  const gd = figureOf(id);
  if (!gd) return [];
  const px = (el) => parseFloat(getComputedStyle(el).fontSize);
  return [...gd.querySelectorAll("text")]
    .filter((el) => el.textContent.trim() && el.getBoundingClientRect().width > 0 && !el.closest(".hoverlayer"))
    .map((el) => [el.textContent, Math.min(px(el), ...[...el.querySelectorAll("tspan")].map(px))]);
}
