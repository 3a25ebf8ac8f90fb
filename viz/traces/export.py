"""Exports of a recorded run: Chrome trace-event JSON and a single-file HTML report.

    python -m viz.traces.export TRACE [--chrome OUT.json] [--html OUT.html [--lang en|zh]]

The Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing, both work offline
from a file) has an "Engine" process with a track per step and per engine phase, plus KV and
queue counters, and a "Requests" process with a track per request: waiting, prefill (chunk)
and decode slices, with instants for the first token, preemptions and the finish. The HTML
report inlines plotly.js from the installed plotly wheel, so it opens with no network; it is
written in one language (report_words.py).
"""
from __future__ import annotations

import argparse
import datetime as dt
import html
import importlib.util
import itertools
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..colors import STATE_COLORS, phase_colors, view_meta
from ..paths import ASSETS
from .report_client import import_map_html, json_script
from .report_words import LANGUAGES, ReportWords, report_words
from .trace import Trace, TraceError, load_trace, trace_phases

ENGINE_PID, REQUESTS_PID = 1, 2
SLICE_NAMES = {"prefill": "prefill", "prefill_chunk": "prefill chunk", "decode": "decode"}


# ---- per-request facts -----------------------------------------------------------------------
@dataclass
class RequestTimeline:
    """What happened to one request, read from the records and events."""

    request_id: str
    arrival: float
    num_prompt_tokens: int = 0
    token_times: list[float] = field(default_factory=list)
    prefix_hit_tokens: int = 0
    preemptions: int = 0
    finish_time: float | None = None
    finish_reason: str | None = None

    @property
    def ttft_ms(self) -> float | None:
        return (self.token_times[0] - self.arrival) * 1e3 if self.token_times else None

    @property
    def mean_itl_ms(self) -> float | None:
        gaps = [b - a for a, b in itertools.pairwise(self.token_times)]
        return statistics.fmean(gaps) * 1e3 if gaps else None


def request_timelines(trace: Trace) -> dict[str, RequestTimeline]:
    """Request id -> timeline, in arrival order."""
    timelines: dict[str, RequestTimeline] = {}
    for entry in trace.entries:
        data = entry.data
        if entry.kind == "event" and data["kind"] == "arrival" and \
                data["request_id"] not in timelines:
            timelines[data["request_id"]] = RequestTimeline(
                data["request_id"], data["time"], data["num_prompt_tokens"])
        if entry.kind != "record":
            continue
        for rid, state in data["requests"].items():  # requests that arrived before recording
            if rid not in timelines:
                timelines[rid] = RequestTimeline(rid, data["t_start"], state["num_prompt_tokens"])
        for rid, hit in data["admitted"].items():
            timelines[rid].prefix_hit_tokens += hit
        for rid in data["preempted"]:
            timelines[rid].preemptions += 1
        for segment in data["segments"]:
            if segment["sampled"]:
                timelines[segment["request_id"]].token_times.append(data["t_end"])
        for rid, reason in data["finished"].items():
            if rid in timelines:
                timelines[rid].finish_time, timelines[rid].finish_reason = data["t_end"], reason
    return timelines


@dataclass
class RunSummary:
    model: str
    device: str
    num_iterations: int
    duration_s: float
    num_requests: int
    num_finished: int
    output_tokens: int
    throughput_tok_s: float
    mean_ttft_ms: float | None
    p90_ttft_ms: float | None
    mean_itl_ms: float | None
    preemptions: int
    prefix_hit_tokens: int
    prefill_chunks: int
    lost_steps: list[int] = field(default_factory=list)  # records the recording could not write


def summarize(trace: Trace, timelines: dict[str, RequestTimeline] | None = None) -> RunSummary:
    timelines = timelines if timelines is not None else request_timelines(trace)
    records = trace.records
    duration = records[-1]["t_end"] - records[0]["t_start"] if records else 0.0
    output_tokens = sum(len(t.token_times) for t in timelines.values())
    ttfts = [t.ttft_ms for t in timelines.values() if t.ttft_ms is not None]
    itls = [t.mean_itl_ms for t in timelines.values() if t.mean_itl_ms is not None]
    return RunSummary(
        model=trace.header["model"]["name"],
        device=trace.header["hardware"].get("gpu") or trace.header["hardware"]["device"],
        num_iterations=len(records),
        duration_s=duration,
        num_requests=len(timelines),
        num_finished=sum(t.finish_reason is not None for t in timelines.values()),
        output_tokens=output_tokens,
        throughput_tok_s=output_tokens / duration if duration > 0 else 0.0,
        mean_ttft_ms=statistics.fmean(ttfts) if ttfts else None,
        p90_ttft_ms=_quantile(ttfts, 0.9),
        mean_itl_ms=statistics.fmean(itls) if itls else None,
        preemptions=sum(t.preemptions for t in timelines.values()),
        prefix_hit_tokens=sum(t.prefix_hit_tokens for t in timelines.values()),
        prefill_chunks=sum(s["kind"] == "prefill_chunk" for r in records for s in r["segments"]),
        lost_steps=trace.lost_steps,
    )


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


# ---- Chrome trace events ---------------------------------------------------------------------
def to_chrome_trace(trace: Trace) -> dict:
    """The run as a trace-event JSON object (timestamps in microseconds from the first entry)."""
    chrome = _ChromeTrace(trace)
    events = chrome.metadata()
    for record in trace.records:
        events += chrome.engine_events(record) + chrome.request_events(record)
    events += [{**_instant("recording gap", ENGINE_PID, 0, chrome.us(gap["time"])),
                "s": "p", "args": {"step": gap["step"], "lost": gap["lost"],
                                   "error": gap["error"]}} for gap in trace.gaps]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": trace.header["model"]["name"],
                          "hardware": trace.header["hardware"],
                          "started_at": trace.header["started_at"]}}


class _ChromeTrace:
    """Trace events of one run: the Engine process's step, phase and counter tracks, and a
    track per request in the Requests process."""

    def __init__(self, trace: Trace):
        self.origin = min((e.data["t_start"] if e.kind == "record" else e.time
                           for e in trace.entries), default=trace.header["started_at"])
        self.phases = trace_phases(trace)
        self.timelines = request_timelines(trace)
        self.tids = {rid: i for i, rid in enumerate(self.timelines, start=1)}
        self.waiting_since = {rid: t.arrival for rid, t in self.timelines.items()}

    def us(self, t: float) -> float:
        return round((t - self.origin) * 1e6, 3)

    def metadata(self) -> list[dict]:
        events = [_meta("process_name", ENGINE_PID, 0, "Engine"),
                  _meta("process_name", REQUESTS_PID, 0, "Requests"),
                  _meta("thread_name", ENGINE_PID, 0, "steps")]
        events += [_meta("thread_name", ENGINE_PID, i, phase)
                   for i, phase in enumerate(self.phases, start=1)]
        events += [_meta("thread_name", REQUESTS_PID, tid, rid) for rid, tid in self.tids.items()]
        events += [_meta("thread_sort_index", REQUESTS_PID, tid, tid, key="sort_index")
                   for tid in self.tids.values()]
        return events

    def engine_events(self, record: dict) -> list[dict]:
        start, end = self.us(record["t_start"]), self.us(record["t_end"])
        events = [_slice(f"step {record['step']}", ENGINE_PID, 0, start, end - start, {
            "step": record["step"], "rows": record["num_rows"], "padded_rows": record["padded_rows"],
            "token_budget": record["token_budget"], "policy": record["policy"],
            "segments": len(record["segments"]), "error": record["error"]})]
        offset = start
        for i, phase in enumerate(self.phases, start=1):
            dur = record["durations_ms"].get(phase, 0) * 1e3
            events.append(_slice(phase, ENGINE_PID, i, offset, dur, {"step": record["step"]}))
            offset += dur
        kv = record["kv"]
        return events + [
            _counter("KV blocks", start, {"used": kv["num_blocks"] - kv["num_free"],
                                          "cached": kv["num_cached"]}),
            _counter("queues", start, {"waiting": record["num_waiting"],
                                       "running": record["num_running"]})]

    def request_events(self, record: dict) -> list[dict]:
        start, end = self.us(record["t_start"]), self.us(record["t_end"])
        events = []
        for segment in record["segments"]:
            events += self._segment_events(record, segment, start, end)
        for rid in record["preempted"]:
            events.append(_instant("preempted", REQUESTS_PID, self.tids[rid], start))
            self.waiting_since[rid] = record["t_end"]
        events += [_instant(f"finished ({reason})", REQUESTS_PID, self.tids[rid], end)
                   for rid, reason in record["finished"].items() if rid in self.tids]
        return events

    def _segment_events(self, record: dict, segment: dict, start: float, end: float) -> list:
        rid = segment["request_id"]
        tid = self.tids[rid]
        events = []
        if rid in self.waiting_since:
            since = self.us(self.waiting_since.pop(rid))
            events.append(_slice("waiting", REQUESTS_PID, tid, since, max(start - since, 0), {}))
        args = {"step": record["step"], "tokens": segment["num_rows"],
                "num_cached": segment["num_cached"], "num_keys": segment["num_keys"]}
        if rid in record["admitted"]:
            args["prefix_hit_tokens"] = record["admitted"][rid]
        events.append(_slice(SLICE_NAMES[segment["kind"]], REQUESTS_PID, tid, start, end - start,
                             args))
        if segment["sampled"] and self.timelines[rid].token_times[0] == record["t_end"]:
            events.append(_instant("first token", REQUESTS_PID, tid, end))
        return events


def _meta(name: str, pid: int, tid: int, value, key: str = "name") -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def _slice(name: str, pid: int, tid: int, ts: float, dur: float, args: dict) -> dict:
    return {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": round(dur, 3),
            "args": args}


def _instant(name: str, pid: int, tid: int, ts: float) -> dict:
    return {"name": name, "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": ts}


def _counter(name: str, ts: float, values: dict) -> dict:
    return {"name": name, "ph": "C", "pid": ENGINE_PID, "tid": 0, "ts": ts, "args": values}


# ---- static HTML report ----------------------------------------------------------------------
TIMELINE_STATES = tuple(STATE_COLORS)  # idle, waiting, prefill, prefill chunk, decode, preempted


def plotly_js() -> str:
    """plotly.min.js from the installed plotly wheel (never a CDN)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the plotly package is not installed")
    return (Path(spec.submodule_search_locations[0]) / "package_data" / "plotly.min.js").read_text()


def report_figures(trace: Trace, words: ReportWords) -> dict[str, dict]:
    """Plotly figures (data + layout) of the run, keyed by element id."""
    records = trace.records
    steps = [r["step"] for r in records]
    timing = [{"type": "bar", "name": words.named(f"phase.{phase['name']}", phase["name"]), "x": steps,
               "marker": {"color": phase["color"]},
               "y": [r["durations_ms"].get(phase["name"], 0) for r in records]}
              for phase in phase_colors(trace_phases(trace))]
    layout_traces = [{"type": "bar", "name": words.named(f"kind.{kind}", label), "x": steps,
                      "y": [sum(s["num_rows"] for s in r["segments"] if s["kind"] == kind)
                            for r in records]} for kind, label in SLICE_NAMES.items()]
    layout_traces += [
        {"type": "scatter", "mode": "lines", "name": words("token_budget"), "x": steps,
         "y": [r["token_budget"] for r in records], "line": {"dash": "dash", "color": "#555"}},
        {"type": "scatter", "mode": "lines", "name": words("padded_rows"), "x": steps,
         "y": [r["padded_rows"] for r in records], "line": {"dash": "dot", "color": "#d62728"}},
    ]
    pool = [
        {"type": "scatter", "mode": "lines", "name": words(name), "x": steps, "y": values}
        for name, values in (
            ("kv_used", [r["kv"]["num_blocks"] - r["kv"]["num_free"] for r in records]),
            ("kv_cached", [r["kv"]["num_cached"] for r in records]),
            ("waiting", [r["num_waiting"] for r in records]),
            ("running", [r["num_running"] for r in records]))
    ]
    rids, z = _request_states(trace)
    n = len(TIMELINE_STATES)
    scale = [[edge, color] for i, color in enumerate(STATE_COLORS.values())
             for edge in (i / n, (i + 1) / n)]
    timeline = [{"type": "heatmap", "x": steps, "y": rids, "z": z, "zmin": -0.5,
                 "zmax": n - 0.5, "colorscale": scale, "xgap": 0, "ygap": 1,
                 "colorbar": {"tickvals": list(range(n)), "ticktext": [words.state(s) for s in TIMELINE_STATES]}}]
    axis = {"xaxis": {"title": {"text": words("axis_step")}}}
    return {
        "timing": {"data": timing, "layout": {
            **axis, "title": {"text": words("fig_timing")}, "barmode": "stack",
            "yaxis": {"title": {"text": words("axis_ms")}}}},
        "layout": {"data": layout_traces, "layout": {
            **axis, "title": {"text": words("fig_layout")}, "barmode": "stack",
            "yaxis": {"title": {"text": words("axis_rows")}}}},
        "timeline": {"data": timeline, "layout": {
            **axis, "title": {"text": words("fig_timeline")},
            "yaxis": {"autorange": "reversed", "type": "category"},
            "height": max(300, 22 * len(rids) + 120)}},
        "pool": {"data": pool, "layout": {
            **axis, "title": {"text": words("fig_pool")}, "yaxis": {"title": {"text": words("axis_count")}}}},
    }


def _request_states(trace: Trace) -> tuple[list[str], list[list[int]]]:
    """Rows of the request timeline heatmap: an index into TIMELINE_STATES per step."""
    codes = {"waiting": 1, "preempted": 5}
    kinds = {"prefill": 2, "prefill_chunk": 3, "decode": 4}
    rids = list(request_timelines(trace))
    rows = {rid: [] for rid in rids}
    for record in trace.records:
        scheduled = {s["request_id"]: kinds[s["kind"]] for s in record["segments"]}
        for rid in rids:
            if rid in scheduled:
                rows[rid].append(scheduled[rid])
            elif rid in record["preempted"]:
                rows[rid].append(codes["preempted"])
            else:
                status = record["requests"].get(rid, {}).get("status")
                rows[rid].append(codes.get(status, 0))
    return rids, [rows[rid] for rid in rids]


def to_html_report(trace: Trace, lang: str = "en") -> str:
    """A single HTML page in ``lang``: charts and summary tables; plotly.js inlined, no network."""
    words = report_words(lang)
    timelines = request_timelines(trace)
    summary = summarize(trace, timelines)
    figures = report_figures(trace, words)
    charts = "\n".join(f'<div id="{key}" class="chart"></div>' for key in figures)
    title = words("title", model=summary.model, device=summary.device)
    return f"""<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child, th:first-child {{ text-align: left; }}
.chart {{ width: 100%; min-height: 360px; }}
</style>
<script>{plotly_js()}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(words("recorded", when=_utc(trace.header["started_at"])))}
<code>{html.escape(json.dumps(_engine_brief(trace.header["engine"])))}</code></p>
<h2>{html.escape(words("summary"))}</h2>
{_summary_table(summary, words)}
{charts}
<h2>{html.escape(words("requests"))}</h2>
{_requests_table(timelines, words)}
{_autopsy_html(trace, lang)}
<script>
const figures = {json.dumps(figures, separators=(",", ":"))};
for (const [id, fig] of Object.entries(figures)) {{
  Plotly.newPlot(id, fig.data, fig.layout, {{responsive: true}});
}}
</script>
</body></html>
"""


def _engine_brief(engine: dict) -> dict:
    keys = ("policy", "max_num_batched_tokens", "enable_chunked_prefill", "enable_prefix_caching",
            "num_kv_blocks", "block_size", "max_num_seqs", "device", "dtype", "attention_backend")
    return {k: engine.get(k) for k in keys}


def _utc(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if isinstance(value, float) else html.escape(str(value))


SUMMARY_ROWS = ("num_iterations", "duration_s", "num_requests", "num_finished", "output_tokens",
                "throughput_tok_s", "mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "preemptions",
                "prefix_hit_tokens", "prefill_chunks", "lost_steps")
REQUEST_COLUMNS = ("col_request", "col_prompt", "col_generated", "col_prefix_hit", "col_ttft", "col_itl",
                   "col_preemptions", "col_finish")


def _summary_table(summary: RunSummary, words: ReportWords) -> str:
    values = asdict(summary)
    values["lost_steps"] = ", ".join(words("lost_step", step=step) for step in summary.lost_steps) or words("none")
    rows = "".join(f"<tr><th>{html.escape(words(key))}</th><td>{_fmt(values[key])}</td></tr>"
                   for key in SUMMARY_ROWS)
    return f'<table id="summary">{rows}</table>'


def _requests_table(timelines: dict[str, RequestTimeline], words: ReportWords) -> str:
    """One row per request; its id opens the request's autopsy."""
    def finish(reason: str | None) -> str | None:
        return reason and words.named(f"reason.{reason}", reason)

    rows = "".join(
        f"<tr><td>{_autopsy_button(t.request_id)}</td>" + "".join(f"<td>{_fmt(v)}</td>" for v in (
            t.num_prompt_tokens, len(t.token_times), t.prefix_hit_tokens,
            t.ttft_ms, t.mean_itl_ms, t.preemptions, finish(t.finish_reason))) + "</tr>"
        for t in timelines.values())
    header = "".join(f"<th>{html.escape(words(key))}</th>" for key in REQUEST_COLUMNS)
    return f'<table id="requests"><tr>{header}</tr>{rows}</table>'


def _autopsy_button(request_id: str) -> str:
    rid = html.escape(request_id)
    return f'<button type="button" class="bs-autopsy-open" data-autopsy="{rid}">{rid}</button>'


def _autopsy_html(trace: Trace, lang: str) -> str:
    """The request autopsy of the live page (assets/js, inlined as modules), fed with every
    record of the trace and its arrivals: click a request id to open it."""
    strings = json.loads((ASSETS / "strings.json").read_text(encoding="utf-8"))["views"]
    data = {"strings": strings, "lang": lang, "meta": view_meta(trace_phases(trace), {}),
            "records": [_lane_record(r) for r in trace.records],
            "arrivals": [{"kind": "arrival", "request_id": e["request_id"], "time": e["time"]}
                         for e in trace.events if e["kind"] == "arrival"]}
    return f"""<style>{(ASSETS / "panels.css").read_text(encoding="utf-8")}
.bs-autopsy-open {{ font: inherit; color: #1f5fbf; background: none; border: 0; padding: 0;
  cursor: pointer; text-decoration: underline; }}</style>
{json_script("bs-report-data", data)}
{import_map_html("report.js")}
<script type="module">
import {{ startReport }} from "batchscope/js/report.js";
startReport(document, JSON.parse(document.getElementById("bs-report-data").textContent));
</script>"""


def _lane_record(record: dict) -> dict:
    """A record as the lanes read it: without the pool's per-block lists."""
    kv = record["kv"]
    return {**record, "kv": {"block_size": kv["block_size"], "num_blocks": kv["num_blocks"]}}


# ---- command line ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m viz.traces.export", description=__doc__.split("\n")[0])
    parser.add_argument("trace", help="a .jsonl or .jsonl.gz trace file")
    parser.add_argument("--chrome", metavar="OUT.json", help="write Chrome trace-event JSON")
    parser.add_argument("--html", metavar="OUT.html", help="write a single-file HTML report")
    parser.add_argument("--lang", choices=LANGUAGES, default="en", help="the HTML report's language (default: en)")
    args = parser.parse_args(argv)
    if not (args.chrome or args.html):
        parser.error("nothing to do: give --chrome and/or --html")
    try:
        trace = load_trace(args.trace)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.chrome:
        Path(args.chrome).write_text(json.dumps(to_chrome_trace(trace)))
        print(f"wrote {args.chrome} (open in https://ui.perfetto.dev or chrome://tracing)")
    if args.html:
        Path(args.html).write_text(to_html_report(trace, args.lang), encoding="utf-8")
        print(f"wrote {args.html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
