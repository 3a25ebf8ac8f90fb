"""Trace files: a live run round-trips through the file; broken files name the bad line."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from viz.live.privacy import HIDDEN_TOKEN
from viz.traces.trace import (
    FORMAT_VERSION,
    Trace,
    TraceEntry,
    TraceError,
    TraceWriter,
    load_trace,
    make_header,
    write_trace,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def live_run(tiny_model_dir, tmp_path_factory):
    """A small live run recorded plain, gzipped and redacted, plus what a live viewer saw."""
    from engine import AsyncLLM, SamplingParams

    root = tmp_path_factory.mktemp("traces")
    llm = AsyncLLM(tiny_model_dir, max_num_batched_tokens=16, num_kv_blocks=64)
    llm.wait_ready(120)
    seen: list[TraceEntry] = []
    llm.subscribe(lambda r: seen.append(TraceEntry("record", r)))
    llm.subscribe_events(lambda e: seen.append(TraceEntry("event", e)))
    paths = {"plain": root / "run.jsonl", "gzip": root / "run.jsonl.gz",
             "redacted": root / "redacted.jsonl", "own": root / "own.jsonl"}
    writers = [TraceWriter(paths["plain"], make_header(llm.info())).attach(llm),
               TraceWriter(paths["gzip"], make_header(llm.info())).attach(llm),
               TraceWriter(paths["redacted"], make_header(llm.info(), "redacted")).attach(llm),
               TraceWriter(paths["own"], make_header(llm.info(), "own"),
                           readable=lambda rid: rid == "mine").attach(llm)]
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    streams = [llm.add_request("a long prompt " * 12, params),
               llm.add_request("short one", params, request_id="mine")]
    for stream in streams:
        stream.collect()
    for writer in writers:
        writer.close()
    llm.shutdown()
    return seen, paths


def test_round_trip_plain_and_gzip(live_run):
    seen, paths = live_run
    assert any(e.kind == "record" for e in seen) and any(e.kind == "event" for e in seen)
    for path in (paths["plain"], paths["gzip"]):
        trace = load_trace(path)
        assert trace.entries == seen
        assert trace.header["version"] == FORMAT_VERSION
        assert trace.header["engine"]["max_num_batched_tokens"] == 16
        assert trace.header["hardware"]["device"] == "cpu"
    assert gzip.open(paths["gzip"]).readline().startswith(b'{"type":"header"')
    chunks = [s for r in load_trace(paths["plain"]).records for s in r["segments"]]
    assert any(s["kind"] == "prefill_chunk" for s in chunks)


def test_a_recorded_trace_holds_no_local_path_of_the_server(live_run, tiny_model_dir):
    """A trace is shared (downloaded, attached to a bug report): the model's directory on the
    server that recorded it is nobody else's business."""
    _, paths = live_run
    text = paths["plain"].read_text()
    assert str(tiny_model_dir) not in text and str(Path(tiny_model_dir).resolve()) not in text


def test_redacted_trace_keeps_layout_and_token_counts_but_no_text(live_run):
    seen, paths = live_run
    trace = load_trace(paths["redacted"])
    assert trace.header["text"] == "redacted"
    assert [r["segments"] for r in trace.records] == [e.data["segments"] for e in seen if e.kind == "record"]
    assert all(set(r["sampled"].values()) <= {HIDDEN_TOKEN} for r in trace.records)
    live_events = [e.data for e in seen if e.kind == "event"]
    for event, live in zip(trace.events, live_events, strict=True):
        assert event["prompt"] is None and event["text"] == ""
        assert event["token_ids"] == [HIDDEN_TOKEN] * len(live["token_ids"])
    assert "long prompt" not in paths["redacted"].read_text()


def test_own_trace_keeps_only_the_recorders_text(live_run):
    seen, paths = live_run
    trace = load_trace(paths["own"])
    assert trace.header["text"] == "own"
    mine = [e for e in trace.events if e["request_id"] == "mine"]
    assert mine[0]["prompt"] == "short one" and "".join(e["text"] for e in mine)
    assert all(e["prompt"] is None and e["text"] == "" for e in trace.events if e["request_id"] != "mine")
    assert "long prompt" not in paths["own"].read_text()


def _lines(path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _write(path, lines: list[str]):
    path.write_text("".join(lines))
    return path


def _edit(lines: list[str], index: int, change) -> list[str]:
    obj = json.loads(lines[index])
    change(obj)
    return [*lines[:index], json.dumps(obj) + "\n", *lines[index + 1:]]


def _first_record(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith('{"type":"record"'))


def _drop_second_record(lines: list[str]) -> list[str]:
    records = [i for i, line in enumerate(lines) if line.startswith('{"type":"record"')]
    return [line for i, line in enumerate(lines) if i != records[1]]


CORRUPTIONS = {
    "cut mid-line": (lambda ls: ls[:5] + [ls[5][:40]], "line 6: truncated"),
    "no end line": (lambda ls: ls[:-1], "truncated: the file stops after line"),
    "not json": (lambda ls: ls[:3] + ["{oops\n"] + ls[4:], "line 4: not valid JSON"),
    "newer version": (lambda ls: _edit(ls, 0, lambda h: h.update(version=FORMAT_VERSION + 1)),
                      f"line 1: trace format version {FORMAT_VERSION + 1} is newer"),
    "older version": (lambda ls: _edit(ls, 0, lambda h: h.update(version=0)),
                      "line 1: trace format version 0 is no longer supported"),
    "header without engine": (lambda ls: _edit(ls, 0, lambda h: h["engine"].pop("policy")),
                              "line 1: header engine is missing ['policy']"),
    "not a trace": (lambda ls: ['{"hello": 1}\n'] + ls[1:], "line 1: not a Batchscope trace"),
    "altered record": (lambda ls: _edit(ls, _first_record(ls),
                                        lambda r: r["data"]["segments"][0].update(row_start=3)),
                       "invalid iteration record: record.segments[0].row_start"),
    "removed record": (_drop_second_record, "follows step"),
    "unknown entry": (lambda ls: ls[:2] + ['{"type": "frame", "data": {}}\n'] + ls[2:],
                      "line 3: unknown entry type 'frame'"),
    "bad event": (lambda ls: ls[:2] + ['{"type": "event", "data": {"kind": "arrival"}}\n'] + ls[2:],
                  "line 3: invalid request event: missing field(s)"),
    "wrong count": (lambda ls: _edit(ls, len(ls) - 1, lambda e: e.update(events=1)),
                    "the end line says 1 events"),
    "after the end": (lambda ls: ls + [ls[1]], "content after the end line"),
}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_broken_file_names_the_line(live_run, tmp_path, name):
    corrupt, message = CORRUPTIONS[name]
    path = _write(tmp_path / "broken.jsonl", corrupt(_lines(live_run[1]["plain"])))
    with pytest.raises(TraceError, match=r"broken\.jsonl: ") as error:
        load_trace(path)
    assert message in str(error.value)


def test_truncated_gzip_names_the_line(live_run, tmp_path):
    data = live_run[1]["gzip"].read_bytes()
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match=r"line \d+: truncated"):
        load_trace(path)


@pytest.mark.parametrize("content, message", [
    (b"", "line 1: the file is empty"),
    (b"\x1f\x8bnot really gzip", "corrupt gzip data"),
    (b"\xff\xfe\x00garbage\n", "line 1: not UTF-8"),
])
def test_garbage_files(tmp_path, content, message):
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        load_trace(path)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="cannot open trace file"):
        load_trace(tmp_path / "nope.jsonl")


def test_write_trace_round_trips(live_run, tmp_path):
    trace = load_trace(live_run[1]["plain"])
    write_trace(tmp_path / "copy.jsonl.gz", trace)
    assert load_trace(tmp_path / "copy.jsonl.gz") == Trace(trace.header, trace.entries)


def test_trace_modules_do_not_import_torch():
    code = ("import sys, viz.traces.trace, viz.traces.player, viz.traces.export, "
            "viz.sources.replay_channels, viz.live.transport; "
            "print(sorted(m for m in ('torch', 'transformers', 'engine.llm_engine') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"  # only the plain-data schema, engine.telemetry, is loaded
