import assert from "node:assert/strict";
import { test } from "node:test";

import { cardOrder, cardView, hiddenCardsNote, MAX_CARDS } from "../../assets/js/cards.js";
import { bannerView, statusParts } from "../../assets/js/header.js";
import { replayPosition, startReplayBar } from "../../assets/js/replay.js";
import { fitParts, plainText, textWidth } from "../../assets/js/text_fit.js";
import { t } from "./fixtures.js";

const entry = (extra) => ({ request_id: "A1", status: "waiting", text: "", num_output_tokens: 0,
  num_prompt_tokens: 5, visible: true, mine: true, ...extra });

test("badges say each state, in the strings' words", () => {
  assert.equal(cardView(entry({ status: "pending" }), t()).badge, "pending");
  assert.equal(cardView(entry({ status: "prefilling", progress: { num_computed_tokens: 457, prefill_target: 812 } }), t()).badge,
    "prefilling 457/812");
  assert.equal(cardView(entry({ status: "finished", finish_reason: "length" }), t()).badge, "finished (length)");
  assert.equal(cardView(entry({ status: "decoding" }), t("zh")).badge, "解码中");
  assert.equal(cardView(entry({ status: "preempted" }), t("both")).badge, "preempted · 被抢占");
  assert.equal(cardView(entry({ status: "finished", finish_reason: "length" }), t("both")).badge,
    "finished (length) · 已完成（达到长度）");
});

test("a card shows the whole prompt, and offers to expand a long one", () => {
  const prompt = "First paragraph.\n\nSecond paragraph, much longer than the first.\n\nThird.\n\nFourth.";
  const view = cardView(entry({ label: prompt }), t());
  assert.equal(view.prompt, prompt);
  assert.equal(view.longPrompt, true);
  assert.equal(cardView(entry({ label: "Why is the sky blue?" }), t()).longPrompt, false);
});

test("another visitor's card: no text, only lengths; an HTML prompt stays a string", () => {
  const hidden = cardView(entry({ visible: false, mine: false, num_output_tokens: 7, prompt: "secret" }), t());
  assert.equal(hidden.prompt, "another visitor's request");
  assert.equal(hidden.text, "5-token prompt, 7 tokens generated");
  assert.equal(cardView(entry({ label: "<img src=x onerror=alert(1)>" }), t()).prompt, "<img src=x onerror=alert(1)>");
});

test("cards: live ones first in arrival order, then finished ones latest first", () => {
  const requests = new Map([["a", { request_id: "a", status: "finished" }], ["b", { request_id: "b", status: "decoding" }],
    ["c", { request_id: "c", status: "finished" }], ["d", { request_id: "d", status: "pending" }]]);
  assert.deepEqual(cardOrder(requests).map((e) => e.request_id), ["b", "d", "c", "a"]);
});

test("the header counts are the server's pending / waiting / running", () => {
  const status = { source: "live", state: "ready", model: "m", paused: true, viewers: 1,
    counts: { pending: 2, waiting: 3, running: 1 } };
  const record = { step: 4, policy: "mixed", token_budget: 512, chunked_prefill: true, num_waiting: 9, num_running: 9 };
  const parts = statusParts(status, record, t(), "ws");
  const counts = parts.find((p) => p.part === "counts");
  assert.deepEqual(counts.data, { pending: 2, waiting: 3, running: 1 });
  assert.equal(counts.text, "2 pending · 3 waiting · 1 running");
  assert.equal(statusParts(status, record, t("both"), "ws").find((p) => p.part === "counts").text,
    "2 pending/待提交 · 3 waiting/排队 · 1 running/运行");
  assert.deepEqual(parts.map((p) => p.text), ["● live", "m", "step 4", "mixed", "budget 512", "chunked prefill on",
    "2 pending · 3 waiting · 1 running", "paused", "1 viewer"]);
  assert.equal(statusParts({ ...status, source: "replay" }, record, t(), "sse").at(-1).text, "over SSE");
});

test("a room's lowered frame rate is said in the header, the full rate is not", () => {
  const status = { source: "live", state: "ready", model: "m", viewers: 500, frame_rate: { now: 4, full: 25 } };
  const [rate] = statusParts(status, null, t(), "ws").filter((p) => p.part === "frame-rate");
  assert.equal(rate.text, "4 frames/s");
  assert.match(rate.title, /many viewers/);
  assert.equal(statusParts(status, null, t("zh"), "ws").find((p) => p.part === "frame-rate").text, "每秒 4 帧");
  const few = { ...status, viewers: 3, frame_rate: { now: 25, full: 25 } };
  assert.equal(statusParts(few, null, t(), "ws").some((p) => p.part === "frame-rate"), false);
});

test("banners: loading with the first-start note, failed, and a dead engine with its cause", () => {
  assert.equal(bannerView({ state: "ready" }, t()).hidden, true);
  assert.match(bannerView({ state: "loading", model: "m", load_seconds: 3 }, t()).text, /first start/);
  const dead = bannerView({ state: "dead", error: "CUDA error: out of memory" }, t("both"));
  assert.equal(dead.failed, true);
  assert.match(dead.text, /engine stopped.*CUDA error: out of memory.*引擎已停止/);
  assert.match(bannerView({ state: "failed", error: "no such file" }, t()).text, /failed to load: no such file/);
});

test("replay position", () => {
  assert.equal(replayPosition({ iteration: 1, num_iterations: 281, step: 1 }, t()), "iteration 2 / 281 · step 1");
  assert.equal(replayPosition({ iteration: -1, num_iterations: 281, step: null }, t()), "– / 281");
});

test("fitting text: wraps between parts, cuts what is left with a hover of the whole", () => {
  const parts = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota"];
  const wide = fitParts(parts, { width: 1000, size: 14 });
  assert.deepEqual([wide.lines, wide.hover], [1, null]);
  const two = fitParts(parts, { width: textWidth("alpha beta gamma · delta epsilon", 14), size: 14 });
  assert.equal(two.text, "alpha beta gamma · delta epsilon<br>zeta eta theta iota");
  const cut = fitParts(parts, { width: 90, size: 14, maxLines: 2 });
  assert.equal(cut.lines, 2);
  assert.equal(cut.hover, "alpha beta gamma · delta epsilon · zeta eta theta iota");
  for (const line of cut.text.split("<br>")) assert.ok(textWidth(line, 14) <= 90);
  assert.equal(plainText("<span style=\"color:red\">A&lt;1&gt;</span> <b>2</b>"), "A<1> 2");
});

test("replay controls act on this page's viewer only", async () => {
  const calls = [];
  const doc = { addEventListener: () => {}, getElementById: () => null };
  const fetchImpl = async (url, init) => { calls.push([url, init.method]); return { ok: true, json: async () => null }; };
  const bar = startReplayBar(doc, { viewer: () => "v 1", t: () => t(), fetchImpl });
  await bar.control("seek", 150);
  await bar.control("step");
  assert.deepEqual(calls, [["/replay/seek?viewer=v+1&value=150", "POST"], ["/replay/step?viewer=v+1", "POST"]]);
});

test("header: the engine part names the execution plan on hover", () => {
  const plan = "cpu float32: linears c-kernel, attention cpu, fused layers";
  const parts = statusParts({ source: "live", engine: { name: "batchscope", version: "0.2.0", plan } }, null, t());
  assert.equal(parts.find((p) => p.part === "engine").title, plan);
  const bare = statusParts({ source: "live", engine: { name: "batchscope", version: "0.2.0" } }, null, t());
  assert.equal(bare.find((p) => p.part === "engine").title, undefined);
});

test("the card list says how many older requests it does not show", () => {
  const requests = (n) => new Map([...Array(n).keys()].map((i) => [`r${i}`, entry({ request_id: `r${i}`, status: "finished" })]));
  assert.equal(hiddenCardsNote(requests(MAX_CARDS), t("en")), "");
  assert.equal(cardOrder(requests(MAX_CARDS + 5)).length, MAX_CARDS);
  assert.equal(hiddenCardsNote(requests(MAX_CARDS + 5), t("en")), "5 older requests not shown (the newest 40 are)");
  assert.equal(hiddenCardsNote(requests(MAX_CARDS + 1), t("en")), "1 older request not shown (the newest 40 are)");
  assert.equal(hiddenCardsNote(requests(MAX_CARDS + 5), t("zh")), "另有 5 个较早的请求未显示（只显示最新的 40 个）");
});
