// A waiting card says its place in line and why it waits (issue 24, part 2).
import assert from "node:assert/strict";
import { test } from "node:test";

import { cardView } from "../../assets/js/cards.js";
import { t } from "./fixtures.js";

const entry = (extra) => ({ request_id: "A1", status: "pending", text: "", num_output_tokens: 0,
  num_prompt_tokens: 5, visible: true, mine: true, ...extra });
const status = { counts: { pending: 3, waiting: 2, running: 12 } };

test("a request queued on the page says its place and how many visitors are ahead", () => {
  const queued = entry({ queue: { place: 3, visitors_ahead: 2 } });
  assert.equal(cardView(queued, t("en"), status).why, "3rd in line: 2 visitors ahead");
  assert.equal(cardView(entry({ queue: { place: 1, visitors_ahead: 0 } }), t("en"), status).why, "1st in line");
  assert.equal(cardView(entry({ queue: { place: 2, visitors_ahead: 1 } }), t("en"), status).why,
    "2nd in line: 1 visitor ahead");
  assert.equal(cardView(entry({ queue: { place: 11, visitors_ahead: 4 } }), t("en"), status).why,
    "11th in line: 4 visitors ahead");
  assert.match(cardView(queued, t("zh"), status).why, /第 3/);
  assert.match(cardView(queued, t("both"), status).why, /^3rd in line: 2 visitors ahead · /);
});

test("a request in the engine's queue says the engine is busy with the running ones", () => {
  assert.equal(cardView(entry({ status: "waiting", queue: { place: 1, visitors_ahead: 0 } }), t("en"), status).why,
    "waiting for the engine: 12 running");
  assert.equal(cardView(entry({ status: "decoding" }), t("en"), status).why, "");
  assert.equal(cardView(entry({}), t("en"), status).why, "");  // pending with no place: due later
  assert.equal(cardView(entry({ status: "waiting" }), t("en"), null).why, "");
});
