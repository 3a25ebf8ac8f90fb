"""A record the writer could not write becomes an explicit gap line: the trace still loads,
replay reports the missing step and the exports show it (no engine: the shipped trace)."""
from __future__ import annotations

from pathlib import Path

import pytest

from viz.sources.replay import ReplaySource
from viz.traces.export import summarize, to_chrome_trace, to_html_report
from viz.traces.trace import TraceWriter, load_trace

SHIPPED = min((Path(__file__).resolve().parent.parent / "assets" / "traces").glob("*.jsonl*"))
LOST = 5  # the index of the record that fails to write


@pytest.fixture(scope="module")
def gapped(tmp_path_factory):
    shipped = load_trace(SHIPPED)
    path = tmp_path_factory.mktemp("gaps") / "gapped.jsonl"
    with TraceWriter(path, shipped.header, readable=lambda _rid: True) as writer:
        for i, record in enumerate(shipped.records[:10]):
            writer.add_record({**record, "kv": object()} if i == LOST else record)
    return shipped, load_trace(path)


def test_a_failed_write_leaves_a_gap_line_and_the_trace_loads(gapped):
    shipped, trace = gapped
    lost_step = shipped.records[LOST]["step"]
    assert [r["step"] for r in trace.records] == \
        [r["step"] for r in shipped.records[:10] if r["step"] != lost_step]
    [gap] = trace.gaps
    assert gap["lost"] == "record" and gap["step"] == lost_step and "serializable" in gap["error"]


def test_replay_and_exports_show_the_gap(gapped):
    shipped, trace = gapped
    lost_step = shipped.records[LOST]["step"]
    replay = ReplaySource(trace, "gapped.jsonl")
    try:
        assert replay.status()["replay"]["gaps"] == [lost_step]
    finally:
        replay.close()
    assert summarize(trace).lost_steps == [lost_step]
    assert f"step {lost_step}" in to_html_report(trace)
    gaps = [e for e in to_chrome_trace(trace)["traceEvents"] if e["name"] == "recording gap"]
    assert [g["args"]["step"] for g in gaps] == [lost_step]
