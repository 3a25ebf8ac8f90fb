// One strings table for every text the client shows, complete in both languages.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { translator } from "../../assets/js/strings.js";
import { ROOT, STRINGS } from "./fixtures.js";

const JS = join(ROOT, "assets", "js");
const sources = (dir = JS) => readdirSync(dir, { withFileTypes: true }).flatMap((f) =>
  (f.isDirectory() ? sources(join(dir, f.name)) : f.name.endsWith(".js") ? [readFileSync(join(dir, f.name), "utf-8")] : []));

test("every entry of the views section has English and Chinese", () => {
  for (const [key, entry] of Object.entries(STRINGS.views)) {
    assert.ok(entry.en && entry.zh, key);
    assert.deepEqual(Object.keys(entry).sort(), ["en", "zh"], key);
  }
});

test("every key the client asks for is in the table", () => {
  const keys = new Set();
  for (const source of sources()) {
    for (const m of source.matchAll(/\bt(?:\.parts|\.short|\(\))?\(\s*"([a-z_]+\.[a-z_]+)"/g)) keys.add(m[1]);
    for (const m of source.matchAll(/\?\s*"([a-z]+\.[a-z_]+)"\s*:\s*"([a-z]+\.[a-z_]+)"/g)) keys.add(m[1]).add(m[2]);
  }
  const dynamic = { kind: ["prefill", "prefill_chunk", "decode"], policy: ["mixed", "prefill_first", "vllm-fcfs", "vllm-priority"],
    state: ["pending", "waiting", "prefilling", "decoding", "preempted", "finished"],
    reason: ["length", "stop", "abort", "error"], lang: ["both", "en", "zh"],
    status: ["pending", "waiting", "running", "source_live", "source_replay"],
    phase: ["schedule", "prepare", "forward", "sample", "postprocess", "execute", "update", "other"] };
  for (const [group, names] of Object.entries(dynamic)) for (const name of names) keys.add(`${group}.${name}`);
  const missing = [...keys].filter((k) => !(k in STRINGS.views) && k !== "batchscope.lang");
  assert.deepEqual(missing, []);
  assert.ok(keys.size > 80);
});

test("the client's own code holds no Chinese (every string a viewer reads comes from the table)", () => {
  for (const source of sources()) assert.doesNotMatch(source, /[\u4e00-\u9fff]/);
});

test("both / EN / 中文", () => {
  const table = { a: { en: "step {n}", zh: "第 {n} 步" }, same: { en: "tok/s", zh: "tok/s" } };
  assert.equal(translator(table, "both")("a", { n: 3 }), "step 3 · 第 3 步");
  assert.equal(translator(table, "en")("a", { n: 3 }), "step 3");
  assert.equal(translator(table, "zh")("a", { n: 3 }), "第 3 步");
  assert.equal(translator(table, "both")("same"), "tok/s");
  assert.deepEqual(translator(table, "both").parts("a", { n: 1 }), ["step 1", "第 1 步"]);
  assert.equal(translator(table)("nope"), "nope");
});

test("the English loading banner tells of the first start, as the Chinese one does", () => {
  const { en, zh } = STRINGS.views["banner.loading"];
  assert.match(zh, /首次启动/);
  assert.match(en, /first start/);
});
