// Attach mode's header (app.py --vllm): which engine and version, its scheduling policy,
// waiting for it to connect, disconnected, and the ingest's refusals and drops, in both languages.
import assert from "node:assert/strict";
import { test } from "node:test";

import { tokenLayout } from "../../assets/js/figures/token_layout.js";
import { bannerView, statusParts } from "../../assets/js/header.js";
import { plainText } from "../../assets/js/text_fit.js";
import { loadTrace, STRINGS, t, view, VLLM_TRACE } from "./fixtures.js";

const attached = (extra) => ({ source: "attach", state: "ready", model: "SmolLM2-135M-Instruct",
  engine: { name: "vllm", version: "0.32.0" }, counts: { pending: 0, waiting: 1, running: 2 },
  ingest: { records: 40, invalid: 0, refused: 0, dropped_by_engine: 0, connections: 1 }, viewers: 1, ...extra });

test("the header names the attached engine and its version", () => {
  const parts = statusParts(attached(), null, t(), "ws");
  assert.deepEqual(parts.slice(0, 3).map((p) => p.text), ["● attached", "vLLM 0.32.0", "SmolLM2-135M-Instruct"]);
  assert.equal(parts.find((p) => p.part === "ingest"), undefined, "no ingest trouble, nothing said");
  assert.equal(statusParts(attached(), null, t("zh"), "ws")[0].text, "● 已接入");
  const local = statusParts({ source: "live", state: "ready", model: "m", engine: { name: "batchscope", version: "0.2.0" } },
    null, t(), "ws");
  assert.equal(local[1].text, "Batchscope 0.2.0");
});

test("vLLM's scheduling policy is named in words, in the header and the token layout's title", () => {
  const record = loadTrace(VLLM_TRACE).records[5];
  assert.equal(record.policy, "vllm-fcfs");
  for (const lang of ["en", "zh"]) {
    const words = STRINGS.views["policy.vllm-fcfs"][lang];
    assert.equal(statusParts(attached(), record, t(lang), "ws").find((p) => p.part === "policy").text, words);
    const title = plainText(tokenLayout([record], view({ lang, width: 900, records: [record] })).layout.annotations[0].text);
    assert.ok(title.includes(words) && !title.includes("policy."), title);
  }
});

test("the ingest's refusals and drops are counted in the header", () => {
  const ingest = { records: 40, invalid: 3, refused: 2, dropped_by_engine: 5, connections: 1 };
  const part = statusParts(attached({ ingest }), null, t(), "ws").find((p) => p.part === "ingest");
  assert.equal(part.text, "3 bad messages dropped · 2 ingest connections refused · vLLM dropped 5 records");
  const zh = statusParts(attached({ ingest }), null, t("zh"), "ws").find((p) => p.part === "ingest");
  assert.match(zh.text, /已丢弃 3 条无效消息/);
});

test("banners: waiting for vLLM to connect, then nothing, then disconnected", () => {
  const waiting = bannerView(attached({ state: "loading", load_seconds: 12.4 }), t("both"));
  assert.equal(waiting.hidden, false);
  assert.equal(waiting.failed, false);
  assert.match(waiting.text, /^Waiting for vLLM to connect… 12 s .*BATCHSCOPE_INGEST.*等待 vLLM 连接… 12 秒/);
  assert.doesNotMatch(waiting.text, /first start|Loading/);
  assert.equal(bannerView(attached(), t()).hidden, true);
  const lost = bannerView(attached({ state: "dead", error: "vllm disconnected; waiting for it to come back" }), t());
  assert.equal(lost.failed, true);
  assert.match(lost.text, /^vLLM disconnected from this dashboard; waiting for it to come back/);
  assert.doesNotMatch(lost.text, /Restart the server/);
});
