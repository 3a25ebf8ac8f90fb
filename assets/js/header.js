// The header's status line, tagline and the banner (loading, failed to load, engine dead).
// Pure views of the status (tested in node) and the DOM calls that show them (textContent).

// The request counts the header shows: the server's (status.counts: the numbers /metrics
// reports), else the latest record's queue lengths.
export function counts(status, record) {
  if (status && status.counts) return status.counts;
  return record ? { pending: 0, waiting: record.num_waiting, running: record.num_running } : null;
}

// The status line as parts: [{part, text, data?}].
export function statusParts(status, record, t, link) {
  if (link === "reconnecting") return [{ part: "link", text: t.short("status.reconnecting") }];
  if (!status) return [{ part: "link", text: t.short("status.connecting") }];
  const plan = (status.engine || {}).plan;  // which kernels run (engine/execution_plan.py), on hover
  const parts = [{ part: "source", text: sourceText(status, t) },
    { part: "engine", text: engineText(status, t), ...(plan ? { title: plan } : {}) },
    { part: "data-parallel", text: dataParallelText(status.data_parallel, t) }, { part: "model", text: status.model || "" }];
  if (record) {
    parts.push({ part: "step", text: t.short("status.step", { step: record.step }) },
      { part: "policy", text: t.short(`policy.${record.policy}`) },
      { part: "budget", text: t.short("status.budget", { budget: record.token_budget }) },
      { part: "chunked", text: t.short(record.chunked_prefill ? "status.chunked_on" : "status.chunked_off") });
  }
  const c = counts(status, record);
  if (c) {
    const text = ["pending", "waiting", "running"].map((k) => `${c[k] ?? 0} ${t.short(`status.${k}`)}`).join(" · ");
    parts.push({ part: "counts", data: c, text }, ...rankParts(status.data_parallel, t));
  }
  if (status.paused && status.source !== "replay") parts.push({ part: "paused", text: t.short("status.paused") });
  if (status.shared_view) parts.push({ part: "shared", text: t.short("status.shared_view") });
  if (status.viewers != null) {
    parts.push({ part: "viewers", text: t.short(status.viewers === 1 ? "status.viewer" : "status.viewers", { n: status.viewers }) });
  }
  const rate = status.frame_rate;  // lowered for a room (viz/live/hub.py)
  if (rate && rate.now < rate.full) {
    parts.push({ part: "frame-rate", text: t.short("status.frame_rate", { n: rate.now }), title: t.short("status.frame_rate_why") });
  }
  if (status.ingest) parts.push({ part: "ingest", text: ingestText(status, t) });
  if (link === "sse") parts.push({ part: "link", text: t.short("status.sse") });
  return parts.filter((p) => p.text);
}

// The engine watched and its version (status.engine), e.g. "vllm 0.32.0".
function engineText(status, t) {
  const engine = status.engine || {};
  return engine.name ? t.short("status.engine", { name: engineName(status), version: engine.version || "" }).trim() : "";
}

// A data-parallel engine's ranks attached now (status.data_parallel, viz/sources/ingest.py):
// "data parallel 2: ranks 0, 1"; nothing for an engine with one rank.
function dataParallelText(dataParallel, t) {
  if (!dataParallel) return "";
  const ranks = dataParallel.ranks.map((r) => r.rank).join(", ");
  return t.short("status.data_parallel", { size: dataParallel.size, ranks });
}

// Each rank's counts, as its latest records have them: "rank 1: 0 waiting, 2 running".
function rankParts(dataParallel, t) {
  return (dataParallel ? dataParallel.ranks : []).map(({ rank, waiting, running }) => ({
    part: "rank", data: { rank, waiting, running },
    text: `${t.short("rank.name", { rank })}: ${waiting} ${t.short("status.waiting")}, ${running} ${t.short("status.running")}`,
  }));
}

// Attach mode's ingest problems (bad messages dropped, connections refused, records the
// engine's own queue dropped); nothing when there are none.
function ingestText(status, t) {
  const ingest = status.ingest, engine = engineName(status);
  return [["invalid", "status.ingest_invalid"], ["refused", "status.ingest_refused"],
    ["dropped_by_engine", "status.ingest_dropped"]]
    .filter(([key]) => ingest[key] > 0).map(([key, text]) => t.short(text, { n: ingest[key], engine })).join(" · ");
}

function sourceText(status, t) {
  const key = `status.source_${status.source}`;
  return `● ${t.has(key) ? t.short(key) : status.source}`;
}

// The banner: hidden, or a loading / failed / dead message.
export function bannerView(status, t) {
  if (!status) return { hidden: true };
  if (status.source === "attach") return attachBanner(status, t);
  const error = status.error ?? "";
  if (status.state === "loading") {
    const seconds = status.load_seconds ?? 0;
    return { hidden: false, failed: false, text: t("banner.loading", { model: status.model || "", seconds }),
      progress: Math.round(100 * (1 - Math.exp(-seconds / 8))) };
  }
  if (status.state === "failed") return { hidden: false, failed: true, text: t("banner.failed", { error }), progress: 100 };
  if (status.state === "dead") return { hidden: false, failed: true, text: t("banner.dead", { error }), progress: 100 };
  return { hidden: true };
}

// Attached to an engine in another process (vLLM): waiting for it to connect, or lost.
function attachBanner(status, t) {
  const engine = engineName(status);
  if (status.state === "loading") {
    const seconds = Math.round(status.load_seconds ?? 0);
    return { hidden: false, failed: false, text: t("banner.attach_waiting", { engine, seconds }),
      progress: Math.round(100 * (1 - Math.exp(-seconds / 60))) };
  }
  if (status.state === "dead") return { hidden: false, failed: true, text: t("banner.attach_lost", { engine }), progress: 100 };
  return { hidden: true };
}

const ENGINE_NAMES = { vllm: "vLLM", batchscope: "Batchscope" };

function engineName(status) {
  const name = (status.engine || {}).name || "";
  return ENGINE_NAMES[name] || name;
}

export function showHeader(doc, status, record, t, link) {
  const line = doc.getElementById("bs-status");
  if (line) {
    line.replaceChildren(...statusParts(status, record, t, link).flatMap((p, i) => {
      const span = doc.createElement("span");
      span.className = `bs-status-${p.part}`;
      span.textContent = p.text;
      if (p.title) span.title = p.title;
      for (const [k, v] of Object.entries(p.data || {})) span.dataset[k] = String(v);
      // the separator keeps to the part before it: a wrapped line never starts with "·"
      return i ? [doc.createTextNode("\u00a0· "), span] : [span];
    }));
  }
  const tagline = doc.querySelector("#bs-header .bs-tagline");
  if (tagline && status) tagline.textContent = t(status.source === "replay" ? "tagline.replay" : "tagline.live");
  showBanner(doc, bannerView(status, t));
}

function showBanner(doc, view) {
  const banner = doc.getElementById("bs-banner");
  if (!banner) return;
  banner.hidden = view.hidden;
  if (view.hidden) return;
  banner.classList.toggle("bs-failed", view.failed);
  banner.querySelector(".bs-banner-text").textContent = view.text;
  banner.querySelector(".bs-progress-bar").style.width = `${view.progress}%`;
}
