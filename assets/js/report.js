// The exported report's request autopsy: the live page's lanes and panel (one implementation),
// fed with the whole trace at once, so every lane is complete. Request ids in the report's
// tables and its request timeline open their autopsy. Loaded by viz/traces/export.py from
// data: URLs (viz/traces/report_client.py).
import { startAutopsy } from "./autopsy_panel.js";
import { LaneBook } from "./lanes.js";
import { translator } from "./strings.js";

// ``data``: {strings (the table's views section), lang (the report's language), meta (palette),
// records, arrivals}.
export function startReport(doc, data) {
  const book = new LaneBook();
  book.apply({ type: "frame", events: data.arrivals, records: data.records });
  const t = translator(data.strings, data.lang);
  const requests = new Map(data.arrivals.map((a, i) => [a.request_id, { color: i % data.meta.palette.length }]));
  const panel = startAutopsy(doc, { book, view: () => ({ meta: data.meta, requests, t, size: null }), until: () => Infinity });
  doc.addEventListener("click", (e) => {
    const button = e.target.closest("[data-autopsy]");
    if (button) panel.open(button.dataset.autopsy);
  });
  const timeline = doc.getElementById("timeline");
  if (timeline && timeline.on) {
    timeline.on("plotly_click", (event) => { if (event.points.length) panel.open(String(event.points[0].y)); });
  }
  for (const el of doc.querySelectorAll("[data-autopsy]")) el.title = t("autopsy.hint");
  window.batchscope = { autopsy: panel };
  return panel;
}
