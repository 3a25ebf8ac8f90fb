// The solo check on a finished request's card: the server runs its prompt again alone on the same
// engine (same sampling, same seed) and compares token by token, "batched = solo"
// (POST /batchscope/solo-check?request=ID, viz/ui/solo_check.py; the visitor's own requests only).
// Each card keeps its last answer; tokens are counted from 0, as in the server's report.

// What the card's solo row shows, as plain strings (pure; tested in node). ``result`` is
// undefined (not asked), {state: "running"}, {state: "done", report} or {state: "failed", error}.
// Only Batchscope's own live engine can re-run a request alone: not a replay, not an attached vLLM.
export function offersSoloCheck(status) {
  return !(status && (status.replay || status.source === "attach"));
}

export function soloView(entry, result, t, live) {
  if (!live || entry.status !== "finished" || !entry.visible) return { show: false, busy: false, button: "", text: "" };
  const asked = !!result && result.state !== "running";
  const view = { show: true, busy: !!result && result.state === "running",
    button: t(asked ? "solo.again" : "solo.button"), text: "" };
  if (!result) return view;
  if (result.state === "running") view.text = t("solo.running");
  else if (result.state === "failed") view.text = t("solo.failed", { error: result.error });
  else view.text = reportText(result.report, t);
  return view;
}

export function reportText(report, t) {
  const parts = [report.same ? t("solo.same")
    : t("solo.differs", { token: report.first_difference, diff: report.max_abs_difference.toPrecision(3) })];
  if (report.tokens_diverge_at !== null) parts.push(t("solo.diverge", { token: report.tokens_diverge_at }));
  parts.push(t(report.batch_invariant ? "solo.invariant_on" : "solo.invariant_off"));
  if (!report.alone) parts.push(t("solo.not_alone"));
  return parts.join(" · ");
}

const results = new Map();  // request id -> its last result (kept across redraws)

// The solo row of a new card: a button and the answer.
export function addSolo(card, fetchImpl = (url, init) => fetch(url, init)) {
  const row = document.createElement("div");
  row.className = "bs-solo";
  const button = document.createElement("button");
  button.type = "button";
  button.className = "bs-solo-button";
  button.addEventListener("click", () => runCheck(card, fetchImpl));
  const text = document.createElement("span");
  text.className = "bs-solo-text";
  row.append(button, text);
  card.appendChild(row);
}

export function fillSolo(card, entry, t, live) {
  card.soloContext = { entry, t, live };
  const view = soloView(entry, results.get(card.dataset.rid), t, live);
  const row = card.querySelector(".bs-solo"), button = row.querySelector(".bs-solo-button");
  row.hidden = !view.show;
  button.textContent = view.button;
  button.title = t("solo.title");
  button.disabled = view.busy;
  row.querySelector(".bs-solo-text").textContent = view.text;
}

async function runCheck(card, fetchImpl) {
  const rid = card.dataset.rid;
  const refresh = (result) => {
    results.set(rid, result);
    const { entry, t, live } = card.soloContext;
    fillSolo(card, entry, t, live);
  };
  refresh({ state: "running" });
  try {
    const response = await fetchImpl(`/batchscope/solo-check?request=${encodeURIComponent(rid)}`, { method: "POST" });
    const body = await response.json();
    refresh(response.ok ? { state: "done", report: body } : { state: "failed", error: body.detail || response.status });
  } catch (error) {
    refresh({ state: "failed", error: String(error) });
  }
}
