import assert from "node:assert/strict";
import { test } from "node:test";

import { offersSoloCheck, reportText, soloView } from "../../assets/js/solo.js";
import { t } from "./fixtures.js";

const finished = { request_id: "A1", status: "finished", visible: true, mine: true };
const report = (extra) => ({ same: false, first_difference: 3, tokens_diverge_at: null, max_abs_difference: 1.9073486328125e-6,
  num_compared: 8, alone: true, batch_invariant: false, ...extra });

test("only a finished request the viewer may read, on a live engine, offers the solo check", () => {
  assert.equal(soloView(finished, undefined, t(), true).show, true);
  assert.equal(soloView(finished, undefined, t(), true).button, "Check against a solo run");
  assert.equal(soloView({ ...finished, status: "decoding" }, undefined, t(), true).show, false);
  assert.equal(soloView({ ...finished, visible: false }, undefined, t(), true).show, false);
  assert.equal(soloView(finished, undefined, t(), false).show, false);  // a replay
});

test("the card says the check is running, then its answer, in the strings' words", () => {
  const running = soloView(finished, { state: "running" }, t(), true);
  assert.deepEqual([running.busy, running.text], [true, "running it again alone…"]);
  const done = soloView(finished, { state: "done", report: report() }, t(), true);
  assert.equal(done.busy, false);
  assert.equal(done.button, "Check again");
  assert.equal(done.text, "first differs at token 3, max |logprob difference| 0.00000191 · batch invariance off");
  assert.equal(soloView(finished, { state: "failed", error: "the engine stayed busy" }, t(), true).text,
    "solo check failed: the engine stayed busy");
});

test("reports: same as alone, tokens that part, a crowded solo run, both languages", () => {
  assert.equal(reportText(report({ same: true, first_difference: null, max_abs_difference: 0, batch_invariant: true }), t()),
    "same as alone · batch invariance on");
  assert.equal(reportText(report({ tokens_diverge_at: 5, alone: false }), t()),
    "first differs at token 3, max |logprob difference| 0.00000191 · the tokens part at token 5 · batch invariance off · another request joined the solo run");
  assert.match(reportText(report(), t("both")), /^first differs at token 3, .* · 从第 3 个 token 起不同/);
});

test("a replay and an attached vLLM offer no solo check; Batchscope's own engine does", () => {
  assert.equal(offersSoloCheck({ source: "live" }), true);
  assert.equal(offersSoloCheck(null), true);
  assert.equal(offersSoloCheck({ source: "replay", replay: { position: 0 } }), false);
  assert.equal(offersSoloCheck({ source: "attach" }), false);
});
