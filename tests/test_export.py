"""Exports: Chrome trace-event JSON and the single-file HTML report (in headless Chromium)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from viz.traces.export import (
    plotly_js,
    request_timelines,
    summarize,
    to_chrome_trace,
    to_html_report,
)
from viz.traces.trace import Trace, load_trace

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.jsonl*"))
REQUIRED = {"X": {"name", "ts", "dur", "pid", "tid"}, "i": {"name", "ts", "pid", "tid", "s"},
            "C": {"name", "ts", "pid", "args"}, "M": {"name", "pid", "tid", "args"}}


@pytest.fixture(scope="module")
def trace():
    assert SHIPPED, "assets/traces/ holds no trace"
    return load_trace(SHIPPED[0])


def test_shipped_trace_shows_the_three_behaviours(trace):
    summary = summarize(trace)
    assert 200 <= summary.num_iterations <= 1000
    assert summary.prefill_chunks > 0 and summary.prefix_hit_tokens > 0 and summary.preemptions > 0
    assert summary.num_finished == summary.num_requests
    assert SHIPPED[0].stat().st_size < 2 * 2**20


def test_chrome_trace_is_valid_trace_event_json(trace):
    exported = json.loads(json.dumps(to_chrome_trace(trace)))
    events = exported["traceEvents"]
    for event in events:
        assert event["ph"] in REQUIRED, event
        assert REQUIRED[event["ph"]] <= set(event), event
        if "ts" in event:
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if event["ph"] == "X":
            assert event["dur"] >= 0
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    steps = {e["args"]["step"] for e in events if e["ph"] == "X" and e["name"].startswith("step ")}
    assert steps == {r["step"] for r in trace.records}
    tracks = set(names.values())
    assert {"schedule", "prepare", "forward", "sample", "postprocess"} <= tracks
    assert set(request_timelines(trace)) <= tracks
    by_request = defaultdict(set)
    for e in events:
        if e["ph"] == "X" and e["pid"] == 2:
            by_request[names[(e["pid"], e["tid"])]].add(e["name"])
    for rid, slices in by_request.items():
        assert {"waiting", "decode"} <= slices, rid
    assert any("prefill chunk" in s for s in by_request.values())
    instants = {e["name"] for e in events if e["ph"] == "i"}
    assert {"first token", "preempted"} <= instants
    _assert_tracks_do_not_overlap(events)


def _assert_tracks_do_not_overlap(events: list[dict]) -> None:
    """Slices on one track must nest or follow each other (here they only follow)."""
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for key, spans in tracks.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-3, key


def test_cli_writes_both_exports_and_rejects_broken_files(tmp_path):
    chrome, report = tmp_path / "run.json", tmp_path / "run.html"
    cli = [sys.executable, "-m", "viz.traces.export"]
    done = subprocess.run([*cli, str(SHIPPED[0]), "--chrome", str(chrome), "--html", str(report)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(chrome.read_text())["traceEvents"]
    assert report.read_text().startswith("<!DOCTYPE html>")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type": "header", "format": "batchscope-trace", "version": 99}\n')
    done = subprocess.run([*cli, str(broken), "--chrome", str(chrome)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "broken.jsonl: line 1: trace format version 99 is newer" in done.stderr


def test_html_report_is_self_contained(trace):
    page = to_html_report(trace)
    library = plotly_js()
    assert page.count(library) == 1
    rest = page.replace(library, "")
    assert "src=" not in rest and "http" not in rest  # nothing loaded from anywhere
    assert 'id="summary"' in rest and 'id="requests"' in rest


def test_an_empty_recording_still_exports(trace):
    empty = Trace(trace.header, [])
    assert {e["ph"] for e in to_chrome_trace(empty)["traceEvents"]} == {"M"}
    assert summarize(empty).num_iterations == 0
    assert 'id="summary"' in to_html_report(empty)


def test_export_help_names_the_module_that_runs():
    done = subprocess.run([sys.executable, "-m", "viz.traces.export", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and "python -m viz.traces.export" in done.stdout
    assert "python -m viz.export " not in done.stdout


def test_the_report_is_written_in_the_language_asked_for_and_refuses_others(trace):
    zh = to_html_report(trace, "zh")
    assert '<html lang="zh">' in zh and "<h2>概要</h2>" in zh and "<th>迭代次数</th>" in zh
    text = re.sub(r"<(script|style)\b.*?</\1>", "", zh, flags=re.DOTALL)
    assert "<h2>Summary</h2>" not in text and "iterations" not in text and "prefill chunks" not in text
    with pytest.raises(ValueError, match="one of en, zh"):
        to_html_report(trace, "fr")
