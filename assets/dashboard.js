// Batchscope dashboard client: one websocket, four Plotly views, one text panel per request.
// Messages are applied as they arrive (latest frame wins); drawing happens at most once per
// animation frame with Plotly.react. Every user-provided or generated string goes through
// textContent or escaped Plotly text, never parsed as HTML, so it is shown and never run.
(() => {
  "use strict";

  // Dark theme: Gradio applies its theme class before it injects this script, so add ours.
  const darken = () => document.body && document.body.classList.add("dark");
  darken();
  document.addEventListener("DOMContentLoaded", darken);

  const PALETTE = ["#4e9af1", "#f28e2b", "#59c96b", "#e15759", "#b07aa1", "#edc948",
    "#76b7b2", "#ff9da7", "#c49c6b", "#a0cbe8", "#d4e157", "#f06bd0"];
  const FREE = 12, CACHED = 13;  // extra colour slots of the KV pool map
  const FREE_COLOR = "#343e56", CACHED_COLOR = "#6a7fa8";
  const PHASES = [["schedule", "#8da0cb"], ["prepare", "#66c2a5"], ["forward", "#fc8d62"],
    ["sample", "#e78ac3"], ["other", "#a6a6a6"]];
  const HISTORY = 40;  // iterations in the history views
  const MAX_PANELS = 40;
  const TEXT_COLOR = "#d8dee9", GRID = "#2b3345";

  const state = {
    requests: new Map(),  // request id -> entry (RequestBook shape + latest record state)
    records: [],          // recent IterationRecord dicts, in step order
    status: null,
    dirtyViews: false,
    dirtyTexts: new Set(),
    seen: { layout: new Set(), blocks: new Set(), attention: new Set(), timing: new Set() },
  };
  let socket = null, owner = "", retries = 0, drawPending = false;

  // ---- websocket ------------------------------------------------------------------------
  function connect(token) {
    if (token !== undefined && token !== null) {
      if (socket && token === owner) return;
      owner = token;
    }
    if (socket) { socket.onclose = null; socket.close(); }
    const url = new URL("/ws/telemetry", window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    if (owner) url.searchParams.set("owner", owner);
    const ws = new WebSocket(url);
    socket = ws;
    ws.onopen = () => { retries = 0; };
    ws.onmessage = (event) => receive(JSON.parse(event.data));
    ws.onclose = () => {
      if (socket !== ws) return;
      socket = null;
      setStatusText("disconnected: reconnecting… · 连接断开，重连中…");
      setTimeout(() => { if (!socket) connect(); }, Math.min(5000, 300 * 2 ** retries++));
    };
  }

  function receive(message) {
    state.status = message.status || state.status;
    document.dispatchEvent(new CustomEvent("batchscope:status", { detail: state.status }));
    if (message.type === "snapshot") {
      state.requests.clear();
      state.records = [];
      for (const entry of message.requests) upsert(entry.request_id, entry);
      addRecords(message.records);
      document.getElementById("bs-texts")?.replaceChildren();
    } else {
      for (const event of message.events) applyEvent(event);
      addRecords(message.records);
    }
    state.dirtyViews = true;
    scheduleDraw();
  }

  function upsert(rid, fields) {
    let entry = state.requests.get(rid);
    if (!entry) {
      entry = { request_id: rid, color: hashColor(rid), text: "", num_output_tokens: 0,
        visible: false, mine: false, status: "waiting" };
      state.requests.set(rid, entry);
    }
    Object.assign(entry, fields);
    state.dirtyTexts.add(rid);
    return entry;
  }

  function applyEvent(e) {
    const entry = upsert(e.request_id, { color: e.color, visible: e.visible, mine: e.mine });
    if (e.label) entry.label = e.label;
    if (e.kind === "arrival") {
      Object.assign(entry, { arrival: e.time, prompt: e.prompt,
        num_prompt_tokens: e.num_prompt_tokens });
      return;
    }
    if (e.text && e.offset + e.text.length > entry.text.length) {
      entry.text = entry.text.slice(0, e.offset) + e.text;
    }
    const n = e.token_ids.length;
    if (n) {
      entry.num_output_tokens = Math.max(entry.num_output_tokens, e.token_offset + n);
      if (!entry.first_token || e.time < entry.first_token) entry.first_token = e.time;
      if (!entry.last_token || e.time > entry.last_token) entry.last_token = e.time;
    }
    if (e.finished) Object.assign(entry, { finished: true, finish_reason: e.finish_reason,
      error: e.error, status: "finished" });
  }

  function addRecords(records) {
    const last = state.records.length ? state.records[state.records.length - 1].step : -1;
    for (const record of records) {
      if (record.step <= last && state.records.length) continue;
      state.records.push(record);
      for (const [rid, info] of Object.entries(record.requests)) {
        const entry = upsert(rid, {});
        entry.progress = info;
        if (!entry.finished) entry.status = info.status;
      }
    }
    if (state.records.length > HISTORY) state.records.splice(0, state.records.length - HISTORY);
  }

  // ---- drawing --------------------------------------------------------------------------
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    window.requestAnimationFrame(draw);
  }

  function draw() {
    drawPending = false;
    drawStatus();
    if (state.dirtyViews && window.Plotly && document.getElementById("bs-timing")) {
      state.dirtyViews = false;
      const record = state.records[state.records.length - 1];
      react("bs-token-layout", tokenLayout(record, state.records));
      react("bs-block-tables", blockTables(record));
      react("bs-attention", attention(record));
      react("bs-timing", timing(state.records));
    }
    drawTexts();
  }

  function react(id, figure) {
    const div = document.getElementById(id);
    if (!div) return;
    window.Plotly.react(div, figure.data, figure.layout, { displayModeBar: false, responsive: true });
  }

  function colorOf(rid) {
    const entry = state.requests.get(rid);
    return PALETTE[(entry ? entry.color : hashColor(rid)) % PALETTE.length];
  }

  function colorIndex(rid) {
    const entry = state.requests.get(rid);
    return (entry ? entry.color : hashColor(rid)) % PALETTE.length;
  }

  function hashColor(rid) {
    let h = 0;
    for (const ch of String(rid)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    return h % PALETTE.length;
  }

  function baseLayout(extra) {
    return Object.assign({
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#111722",
      font: { color: TEXT_COLOR, size: 13, family: "Inter, 'Noto Sans CJK SC', 'WenQuanYi Micro Hei', system-ui, sans-serif" },
      margin: { l: 56, r: 16, t: 28, b: 40 }, showlegend: false, autosize: true,
      hoverlabel: { font: { size: 13 } },
    }, extra);
  }

  function axis(extra) {
    return Object.assign({ gridcolor: GRID, zerolinecolor: GRID, linecolor: GRID }, extra);
  }

  function emptyFigure(message) {
    return { data: [], layout: baseLayout({
      xaxis: axis({ visible: false }), yaxis: axis({ visible: false }),
      annotations: [{ text: message, showarrow: false, font: { size: 15, color: "#8892a6" },
        xref: "paper", yref: "paper", x: 0.5, y: 0.5 }],
    }) };
  }

  const isPrefill = (segment) => segment.kind !== "decode";

  function segmentMarker(segment, lineWidth) {
    const color = colorOf(segment.request_id);
    const marker = { color, line: { color: "#0b0e14", width: lineWidth } };
    if (isPrefill(segment)) marker.pattern = { shape: "/", bgcolor: color, fgcolor: "rgba(0,0,0,0.45)", fillmode: "overlay", size: 7, solidity: 0.25 };
    return marker;
  }
  // Plotly renders a few HTML-like tags in text: escape ids before they go into one.
  const esc = (text) => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const rows = (a, n) => (n === 1 ? `row ${a}` : `rows ${a}–${a + n - 1}`);

  // 1. token layout: this iteration's strip (with the budget gauge) and recent iterations.
  function tokenLayout(record, history) {
    if (!record) return emptyFigure("Fire a workload to see packed iterations · 点击发射");
    const data = [];
    for (const s of record.segments) {
      state.seen.layout.add(s.request_id);
      data.push({
        type: "bar", orientation: "h", x: [s.num_rows], base: [s.row_start], y: ["rows"],
        xaxis: "x", yaxis: "y", width: 0.9, name: esc(s.request_id),
        text: [`${esc(s.request_id)} ${isPrefill(s) ? "prefill" : "decode"} ${s.num_rows}`],
        textposition: "inside", insidetextanchor: "middle", textangle: 0,
        textfont: { color: "#0b0e14", size: 13 },
        marker: segmentMarker(s, 1),
        hovertemplate: `${esc(s.request_id)} · ${s.kind}<br>${rows(s.row_start, s.num_rows)}` +
          `<br>positions ${s.num_cached}–${s.num_keys - 1}<extra></extra>`,
      });
    }
    const budget = record.token_budget;
    data.push({ type: "bar", orientation: "h", x: [record.num_rows], base: [0], y: ["budget"],
      xaxis: "x3", yaxis: "y", width: 0.5, marker: { color: "#7f8aa3" },
      hovertemplate: `${record.num_rows} of ${budget} budget rows<extra></extra>` });
    const traces = new Map();
    for (const r of history) {
      for (const s of r.segments) {
        const key = `${s.request_id}|${isPrefill(s)}`;
        if (!traces.has(key)) {
          traces.set(key, { type: "bar", x: [], y: [], base: [], customdata: [], xaxis: "x2",
            yaxis: "y2", name: esc(s.request_id), width: 0.8,
            marker: segmentMarker(s, 0.5),
            hovertemplate: `${esc(s.request_id)}<br>step %{x} · %{customdata}<extra></extra>` });
        }
        const t = traces.get(key);
        t.x.push(r.step); t.y.push(s.num_rows); t.base.push(s.row_start);
        t.customdata.push(`${s.kind} · ${rows(s.row_start, s.num_rows)}`);
      }
    }
    data.push(...traces.values());
    const sum = record.segments.length <= 6
      ? record.segments.map((s) => `<span style="color:${colorOf(s.request_id)}">${esc(s.request_id)} ${s.num_rows}</span>`).join(" + ")
      : `${record.segments.length} requests`;
    const stalled = Object.entries(record.requests)
      .filter(([rid, info]) => info.status === "decoding" &&
        !record.segments.some((s) => s.request_id === rid)).map(([rid]) => esc(rid));
    const title = `step ${record.step}: ${sum} = <b>${record.num_rows}</b> rows of ${budget}` +
      (record.policy === "mixed" ? "" : ` · ${record.policy}`) + (stalled.length ? ` · <span style="color:#ff6b6b">stalled: ${stalled.join(", ")}</span>` : "");
    return { data, layout: baseLayout({
      barmode: "overlay", margin: { l: 56, r: 16, t: 30, b: 40 },
      uniformtext: { mode: "hide", minsize: 10 },
      xaxis: axis({ domain: [0, 1], range: [0, Math.max(1, record.num_rows)], anchor: "y",
        showticklabels: false, showgrid: false, zeroline: false }),
      xaxis3: axis({ overlaying: "x", range: [0, Math.max(budget, record.num_rows)], anchor: "y",
        side: "bottom", showgrid: false, tickfont: { size: 10 }, zeroline: false }),
      yaxis: axis({ domain: [0.7, 1], fixedrange: true, categoryorder: "array",
        categoryarray: ["budget", "rows"], tickfont: { size: 11 } }),
      xaxis2: axis({ anchor: "y2", title: { text: "iteration (step)", standoff: 4 } }),
      yaxis2: axis({ domain: [0, 0.54], title: { text: "rows" }, rangemode: "tozero" }),
      annotations: [{ xref: "paper", yref: "paper", x: 0, y: 1.01, xanchor: "left",
        yanchor: "bottom", showarrow: false, text: title, font: { size: 14 } }],
    }) };
  }

  // 2. block tables (logical -> physical) and the whole KV pool.
  function blockTables(record) {
    if (!record) return emptyFigure("No KV blocks in use yet · 尚未使用 KV 块");
    const kv = record.kv;
    const ids = Object.keys(record.block_tables).slice(0, 16);
    const maxLogical = Math.min(64, Math.max(1, ...ids.map((r) => record.block_tables[r].length)));
    const z = [], text = [], hover = [], shared = { x: [], y: [] };
    for (const rid of ids) {
      state.seen.blocks.add(rid);
      const table = record.block_tables[rid];
      const zr = [], tr = [], hr = [];
      for (let j = 0; j < maxLogical; j++) {
        const b = table[j];
        if (b === undefined) { zr.push(null); tr.push(""); hr.push(""); continue; }
        const holder = kv.owners[b] || rid;
        zr.push(colorIndex(holder));
        tr.push(String(b));
        if (kv.ref_counts[b] > 1) { shared.x.push(j); shared.y.push(esc(rid)); }
        hr.push(`${esc(rid)} · logical ${j} → physical ${b}<br>ref count ${kv.ref_counts[b]}` +
          (holder !== rid ? ` · shared, written by ${esc(holder)}` : ""));
      }
      z.push(zr); text.push(tr); hover.push(hr);
    }
    const n = kv.num_blocks;
    const shown = Math.min(n, 4096);
    const cols = Math.ceil(Math.sqrt(shown * 1.4));
    const cached = new Set(kv.cached);
    const pz = [], pt = [], ph = [];
    for (let row = 0; row * cols < shown; row++) {
      const zr = [], tr = [], hr = [];
      for (let c = 0; c < cols; c++) {
        const b = row * cols + c;
        if (b >= shown) { zr.push(null); tr.push(""); hr.push(""); continue; }
        const ref = kv.ref_counts[b], holder = kv.owners[b];
        const inUse = ref > 0 && holder;
        zr.push(inUse ? colorIndex(holder) : cached.has(b) ? CACHED : FREE);
        tr.push(ref > 1 ? `×${ref}` : "");
        hr.push(`block ${b} · ` + (inUse ? `${esc(holder)} · ref ${ref}` : "free") +
          (cached.has(b) ? " · cached" : ""));
      }
      pz.push(zr); pt.push(tr); ph.push(hr);
    }
    const scale = discreteScale();
    const data = [
      { type: "heatmap", z, text, customdata: hover, x: [...Array(maxLogical).keys()], y: ids.map(esc),
        xaxis: "x", yaxis: "y", zmin: -0.5, zmax: CACHED + 0.5, colorscale: scale,
        showscale: false, xgap: 2, ygap: 3,
        texttemplate: cellPixels("bs-block-tables", maxLogical, ids.length) >= 22 ? "%{text}" : "",
        textfont: { size: 11, color: "#0b0e14" }, hovertemplate: "%{customdata}<extra></extra>" },
      { type: "scatter", mode: "markers", x: shared.x, y: shared.y, xaxis: "x", yaxis: "y",
        hoverinfo: "skip", marker: { symbol: "square-open", color: "#ffffff",
          size: cellPixels("bs-block-tables", maxLogical, ids.length), line: { width: 2 } } },
      { type: "heatmap", z: pz, text: pt, customdata: ph, xaxis: "x2", yaxis: "y2",
        zmin: -0.5, zmax: CACHED + 0.5, colorscale: scale, showscale: false, xgap: 1, ygap: 1,
        texttemplate: cellPixels("bs-block-tables", cols, pz.length) >= 18 ? "%{text}" : "",
        textfont: { size: 9, color: "#0b0e14" },
        hovertemplate: "%{customdata}<extra></extra>" },
    ];
    const inUse = kv.ref_counts.filter((r) => r > 0).length;
    return { data, layout: baseLayout({
      margin: { l: 56, r: 12, t: 30, b: 40 },
      xaxis: axis({ domain: [0, 0.46], title: { text: "logical block", standoff: 4 },
        showgrid: false, zeroline: false }),
      yaxis: axis({ autorange: "reversed", showgrid: false, type: "category" }),
      xaxis2: axis({ domain: [0.54, 1], showticklabels: false, showgrid: false, zeroline: false,
        title: { text: `${inUse} used · <span style="color:${FREE_COLOR}">■</span> ${kv.num_free} free · ` +
          `<span style="color:${CACHED_COLOR}">■</span> ${kv.num_cached} cached`,
          standoff: 4, font: { size: 12 } } }),
      yaxis2: axis({ anchor: "x2", autorange: "reversed", showticklabels: false,
        showgrid: false, zeroline: false, scaleanchor: "x2" }),
      annotations: [{ xref: "paper", yref: "paper", x: 0, y: 1.02, yanchor: "bottom",
        showarrow: false, xanchor: "left", text: `block tables · ${kv.block_size} tokens/block · □ shared` },
        { xref: "paper", yref: "paper", x: 1, y: 1.02, yanchor: "bottom", xanchor: "right",
          showarrow: false, text: `KV pool · ${n} blocks` }],
    }) };
  }

  // The on-screen size of one block-table cell, for the markers drawn over shared blocks.
  function cellPixels(id, columns, rowsShown) {
    const div = document.getElementById(id);
    const width = (div ? div.clientWidth : 600) * 0.5 - 60, height = (div ? div.clientHeight : 360) - 80;
    return Math.max(4, Math.min(width / columns, height / Math.max(1, rowsShown)) - 3);
  }

  function discreteScale() {
    const colors = [...PALETTE, FREE_COLOR, CACHED_COLOR];
    const n = colors.length, scale = [];
    colors.forEach((c, i) => { scale.push([i / n, c], [(i + 1) / n, c]); });
    return scale;
  }

  // 3. attention: each segment's query rows against its own keys (ragged block diagonal).
  // A segment's cached keys are attended by every one of its rows (a full rectangle), so a
  // long cached context is drawn compressed (hatched) and only this step's keys at full scale.
  function attention(record) {
    if (!record || !record.segments.length) return emptyFigure("No attention this step · 本步无注意力计算");
    const total = record.num_rows;
    const cachedWidth = (c) => Math.min(c, Math.max(16, Math.round(total / 2)));
    const widths = record.segments.map((s) => cachedWidth(s.num_cached) + s.num_rows);
    const gap = Math.max(2, Math.round(widths.reduce((a, b) => a + b, 0) * 0.03));
    const data = [], keyTicks = [], keyText = [], annotations = [];
    let offset = 0;
    record.segments.forEach((s, i) => {
      state.seen.attention.add(s.request_id);
      const color = colorOf(s.request_id), rid = esc(s.request_id);
      const r0 = s.row_start, n = s.num_rows, c = s.num_cached, cw = cachedWidth(c);
      const label = `${rid} · ${s.kind}<br>q ${rows(r0, n)} (positions ${c}–${s.num_keys - 1})` +
        `<br>keys 0–${s.num_keys - 1}` + (c ? ` (${c} cached)` : "");
      if (cw) {
        data.push({ type: "scatter", mode: "lines", x: [offset, offset + cw, offset + cw, offset, offset],
          y: [r0, r0, r0 + n, r0 + n, r0], fill: "toself", fillcolor: color, opacity: 0.55,
          fillpattern: cw < c ? { shape: "/", fgcolor: "rgba(0,0,0,0.5)", bgcolor: color, size: 6 } : undefined,
          line: { color, width: 1 }, hoveron: "fills", name: `${rid}: ${c} cached keys` +
            (cw < c ? ` (drawn ${cw} wide)` : ""), hovertemplate: `${label}<extra></extra>` });
      }
      const xs = [offset + cw], ys = [r0];
      const steps = Math.min(n, 48);
      for (let j = 0; j < steps; j++) {
        const a = Math.floor((j * n) / steps), b = Math.floor(((j + 1) * n) / steps);
        xs.push(offset + cw + b, offset + cw + b);
        ys.push(r0 + a, r0 + b);
      }
      xs.push(offset + cw, offset + cw);
      ys.push(r0 + n, r0);
      data.push({ type: "scatter", mode: "lines", x: xs, y: ys, fill: "toself", fillcolor: color,
        line: { color, width: 1.5 }, hoveron: "fills+points", opacity: 0.95,
        name: `${rid} · ${s.kind} · q ${rows(r0, n)} · keys 0–${s.num_keys - 1}`,
        hovertemplate: `${label}<extra></extra>` });
      keyTicks.push(offset + widths[i]);
      keyText.push(`<span style="color:${color}">${rid}</span> ${s.num_keys}`);
      if (n >= total / 12) {  // thin segments are named by their key tick instead
        annotations.push({ x: offset + widths[i], y: r0 + n / 2, xanchor: "left", showarrow: false,
          text: ` ${rid} ${n}×${s.num_keys}`, font: { color, size: 12 } });
      }
      offset += widths[i] + gap;
    });
    const cu = record.cu_seqlens_q;
    const rowTicks = [];  // cu_seqlens_q, thinned where rows are too close to label
    for (const v of cu) if (!rowTicks.length || v - rowTicks[rowTicks.length - 1] >= total / 14) rowTicks.push(v);
    annotations.push({ xref: "paper", yref: "paper", x: 0, y: 1.01, yanchor: "bottom",
      xanchor: "left", showarrow: false, font: { size: 12 },
      text: `cu_seqlens_q = [${abbreviate(cu)}] · seq_lens_k = [${abbreviate(record.seq_lens_k)}]` });
    return { data, layout: baseLayout({
      margin: { l: 56, r: 16, t: 30, b: 44 },
      xaxis: axis({ range: [0, offset * 1.22], tickvals: keyTicks, ticktext: keyText,
        title: { text: "keys per request (seq_lens_k), cached part compressed", standoff: 4 },
        zeroline: false, showgrid: false }),
      yaxis: axis({ range: [total, 0], tickvals: rowTicks, showgrid: false,
        title: { text: "query rows (cu_seqlens_q)" }, zeroline: false }),
      annotations,
    }) };
  }

  function abbreviate(values) {
    return values.length <= 10 ? values.join(", ")
      : `${values.slice(0, 5).join(", ")}, …, ${values.slice(-3).join(", ")}`;
  }

  // 4. timing: phase times, tokens per iteration, throughput, padding cost.
  function timing(history) {
    if (!history.length) return emptyFigure("No iterations yet · 尚无迭代");
    const steps = history.map((r) => r.step);
    for (const r of history) for (const s of r.segments) state.seen.timing.add(s.request_id);
    const data = PHASES.map(([phase, color]) => ({
      type: "bar", name: phase, x: steps, xaxis: "x", yaxis: "y", marker: { color },
      y: history.map((r) => phase === "other" ? Math.max(0, r.durations_ms.total -
        PHASES.slice(0, 4).reduce((a, [p]) => a + r.durations_ms[p], 0)) : r.durations_ms[phase]),
      hovertemplate: `step %{x} · ${phase} %{y:.1f} ms<extra></extra>`,
    }));
    data.push({ type: "bar", name: "rows", x: steps, y: history.map((r) => r.num_rows),
      xaxis: "x2", yaxis: "y2", marker: { color: "#5b8def" },
      hovertemplate: "step %{x} · %{y} rows (tokens)<extra></extra>" });
    data.push({ type: "scatter", mode: "lines+markers", name: "padded", x: steps,
      y: history.map((r) => r.padded_rows), xaxis: "x2", yaxis: "y2",
      line: { color: "#ff6b6b", dash: "dot", width: 1.5 }, marker: { size: 4 },
      hovertemplate: "step %{x} · a padded batch: %{y} rows<extra></extra>" });
    // Over the last 10 records; steps the hub dropped (gaps in step numbers) count as
    // sampling as many tokens as the records received, so drops do not lower the curve.
    const throughput = history.map((r, i) => {
      const first = history[Math.max(0, i - 9)];
      const span = r.t_end - first.t_start;
      const window = history.slice(Math.max(0, i - 9), i + 1);
      const generated = window.reduce((a, x) => a + Object.keys(x.sampled).length, 0);
      const steps = r.step - first.step + 1;
      return span > 0 ? generated * (steps / window.length) / span : 0;
    });
    data.push({ type: "scatter", mode: "lines", name: "tok/s", x: steps, y: throughput,
      xaxis: "x2", yaxis: "y3", line: { color: "#edc948", width: 2 },
      hovertemplate: "step %{x} · %{y:.1f} generated tok/s<extra></extra>" });
    const packed = history.reduce((a, r) => a + r.num_rows, 0);
    const padded = history.reduce((a, r) => a + r.padded_rows, 0);
    const last = history[history.length - 1];
    return { data, layout: baseLayout({
      barmode: "stack", showlegend: true, margin: { l: 56, r: 56, t: 30, b: 40 },
      legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom", font: { size: 11 },
        bgcolor: "rgba(0,0,0,0)", traceorder: "normal" },
      xaxis: axis({ anchor: "y", showticklabels: false, matches: "x2" }),
      yaxis: axis({ domain: [0.5, 1], title: { text: "ms" }, rangemode: "tozero" }),
      xaxis2: axis({ anchor: "y2", title: { standoff: 4, font: { size: 12 },
        text: `step · last ${last.durations_ms.total.toFixed(0)} ms · ` +
        `${throughput[throughput.length - 1].toFixed(1)} tok/s · padded: ${packed ? (padded / packed).toFixed(2) : "1.00"}× rows` } }),
      yaxis2: axis({ domain: [0, 0.4], title: { text: "rows" }, rangemode: "tozero" }),
      yaxis3: axis({ overlaying: "y2", side: "right", showgrid: false, rangemode: "tozero",
        title: { text: "tok/s", font: { color: "#edc948" } }, tickfont: { color: "#edc948" } }),
    }) };
  }

  // ---- status line and text panels (textContent only) -------------------------------------
  function setStatusText(text) {
    const el = document.getElementById("bs-status");
    if (el) el.textContent = text;
  }

  function drawStatus() {
    const s = state.status;
    if (!s) return;
    const record = state.records[state.records.length - 1];
    const parts = [s.source === "live" ? "● live" : `● ${s.source}`, s.model || ""];
    if (record) parts.push(`step ${record.step}`, record.policy, `budget ${record.token_budget}`,
      `chunked ${record.chunked_prefill ? "on" : "off"}`,
      `${record.num_running} running · ${record.num_waiting} waiting`);
    if (s.paused) parts.push("paused · 已暂停");
    if (s.shared_view) parts.push("shared view");
    parts.push(`${s.viewers} viewer${s.viewers === 1 ? "" : "s"}`);
    setStatusText(parts.filter(Boolean).join(" · "));
    const banner = document.getElementById("bs-banner");
    if (!banner) return;
    const loading = s.state === "loading", failed = s.state === "failed";
    banner.hidden = !(loading || failed);
    banner.classList.toggle("bs-failed", failed);
    banner.querySelector(".bs-banner-text").textContent = failed
      ? `The model failed to load · 模型加载失败: ${s.load_error}`
      : `Loading ${s.model}… ${s.load_seconds ?? 0} s · 模型加载中（首次启动需转换权重）`;
    const bar = banner.querySelector(".bs-progress-bar");
    bar.style.width = `${loading ? Math.round(100 * (1 - Math.exp(-(s.load_seconds || 0) / 8))) : 100}%`;
  }

  function stateLabel(entry) {
    const p = entry.progress;
    if (entry.finished) return `finished (${entry.finish_reason || "done"})`;
    if (entry.status === "prefilling" && p) return `prefilling ${p.num_computed_tokens}/${p.prefill_target}`;
    return entry.status || "waiting";
  }

  function metrics(entry) {
    const parts = [];
    if (entry.first_token && entry.arrival) parts.push(`TTFT ${duration(entry.first_token - entry.arrival)}`);
    if (entry.num_output_tokens > 1 && entry.last_token > entry.first_token) {
      parts.push(`ITL ${duration((entry.last_token - entry.first_token) / (entry.num_output_tokens - 1))}`);
    }
    parts.push(`${entry.num_prompt_tokens || 0} → ${entry.num_output_tokens || 0} tok`);
    return parts.join(" · ");
  }

  function duration(seconds) {
    return seconds >= 10 ? `${seconds.toFixed(1)} s` : `${Math.round(seconds * 1000)} ms`;
  }

  function drawTexts() {
    const root = document.getElementById("bs-texts");
    if (!root || !state.dirtyTexts.size) return;
    const entries = [...state.requests.values()];
    const order = [...entries.filter((e) => !e.finished), ...entries.filter((e) => e.finished).reverse()]
      .slice(0, MAX_PANELS);
    for (const entry of order) {
      if (!state.dirtyTexts.has(entry.request_id) && panelOf(root, entry.request_id)) continue;
      fillPanel(panelOf(root, entry.request_id) || makePanel(root, entry.request_id), entry);
    }
    const keep = new Set(order.map((e) => e.request_id));
    for (const panel of [...root.children]) if (!keep.has(panel.dataset.rid)) panel.remove();
    order.forEach((entry, i) => {
      const panel = panelOf(root, entry.request_id);
      if (root.children[i] !== panel) root.insertBefore(panel, root.children[i] || null);
    });
    state.dirtyTexts.clear();
  }

  function panelOf(root, rid) {
    for (const child of root.children) if (child.dataset.rid === rid) return child;
    return null;
  }

  function makePanel(root, rid) {
    const panel = document.createElement("div");
    panel.className = "bs-req";
    panel.dataset.rid = rid;
    for (const cls of ["bs-req-head", "bs-req-prompt", "bs-req-text"]) {
      const part = document.createElement("div");
      part.className = cls;
      panel.appendChild(part);
    }
    const head = panel.firstChild;
    for (const cls of ["bs-chip", "bs-rid", "bs-state", "bs-metrics"]) {
      const span = document.createElement("span");
      span.className = cls;
      head.appendChild(span);
    }
    root.appendChild(panel);
    return panel;
  }

  function fillPanel(panel, entry) {
    const color = colorOf(entry.request_id);
    panel.style.setProperty("--req-color", color);
    panel.classList.toggle("bs-mine", !!entry.mine);
    panel.classList.toggle("bs-hidden-text", !entry.visible);
    panel.dataset.state = entry.finished ? "finished" : entry.status || "waiting";
    const head = panel.firstChild;
    head.querySelector(".bs-rid").textContent = entry.request_id;
    head.querySelector(".bs-state").textContent = stateLabel(entry);
    head.querySelector(".bs-metrics").textContent = metrics(entry);
    const prompt = panel.querySelector(".bs-req-prompt");
    const text = panel.querySelector(".bs-req-text");
    if (entry.visible) {
      prompt.textContent = entry.label || entry.prompt || "";
      text.textContent = entry.text + (entry.error ? `\n[error: ${entry.error}]` : "");
    } else {
      prompt.textContent = "🔒 another visitor's request · 其他访客的请求";
      text.textContent = `${entry.num_prompt_tokens || "?"}-token prompt, ${entry.num_output_tokens || 0} tokens generated`;
    }
  }

  // ---- test and console hooks -------------------------------------------------------------
  function debug() {
    const texts = {};
    for (const [rid, e] of state.requests) texts[rid] = e.text.length;
    return { connected: !!socket && socket.readyState === 1, owner: !!owner,
      status: state.status, lastStep: state.records.length ? state.records[state.records.length - 1].step : -1,
      requests: [...state.requests.keys()], texts,
      seen: Object.fromEntries(Object.entries(state.seen).map(([k, v]) => [k, [...v]])) };
  }

  window.batchscope = { connect, debug };
  connect();
})();
