// Small inline SVG icons: the project's fonts (DejaVu, WenQuanYi Micro Hei) have no glyphs for
// ⏸ ⏭ ⏺ or 🔒, which would render as empty boxes. Built with DOM calls, never parsed markup.
const SVG = "http://www.w3.org/2000/svg";
const PATHS = {
  play: ["M4 2 L14 8 L4 14 Z"],
  pause: ["M3 2 H7 V14 H3 Z", "M9 2 H13 V14 H9 Z"],
  step: ["M2 2 L10 8 L2 14 Z", "M11 2 H14 V14 H11 Z"],
  lock: ["M4 7 V5 A4 4 0 0 1 12 5 V7 H10.5 V5 A2.5 2.5 0 0 0 5.5 5 V7 Z", "M3 7 H13 V15 H3 Z"],
};

export function icon(name) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "1em");
  svg.setAttribute("height", "1em");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", `bs-icon bs-icon-${name}`);
  for (const d of PATHS[name]) {
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("d", d);
    path.setAttribute("fill", "currentColor");
    svg.appendChild(path);
  }
  return svg;
}
