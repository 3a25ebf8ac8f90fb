"""Recorder: the whole run for the operator, one visitor's text only for the Record toggle."""
from __future__ import annotations

import pytest

from viz.live.hub import TelemetryHub
from viz.live.privacy import HIDDEN_TOKEN
from viz.traces.recording import RUN, Recorder
from viz.traces.trace import load_trace


@pytest.fixture(scope="module")
def recordings(tiny_model_dir, tmp_path_factory):
    from engine import AsyncLLM, SamplingParams

    root = tmp_path_factory.mktemp("recordings")
    llm = AsyncLLM(tiny_model_dir, num_kv_blocks=64)
    hub = TelemetryHub()
    hub.attach(llm)
    recorder = Recorder(llm, hub, root)
    with pytest.raises(RuntimeError, match="not loaded"):
        recorder.start("alice-tab", "alice")
    recorder.record_run(root / "run.jsonl")  # while the model loads
    llm.wait_ready(120)
    alice = recorder.start("alice-tab", "alice")
    params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    streams = []
    for owner in ("alice", "bob"):
        rid = f"{owner}-1"
        hub.claim(rid, owner, label=f"{owner}'s question")
        streams.append(llm.add_request(f"{owner} asks something private", params, request_id=rid))
    for stream in streams:
        stream.collect()
    assert recorder.stop("alice-tab") == alice
    assert recorder.stop("alice-tab") is None
    recorder.close()
    llm.shutdown()
    return load_trace(root / "run.jsonl"), load_trace(alice)


def texts(trace, rid: str) -> tuple[str | None, str | None, str]:
    arrival = next(e for e in trace.events if e["request_id"] == rid and e["kind"] == "arrival")
    generated = "".join(e["text"] for e in trace.events if e["request_id"] == rid)
    return arrival["prompt"], arrival.get("label"), generated


def test_the_run_recording_holds_every_text(recordings):
    run, _ = recordings
    assert run.header["text"] == "full"
    for owner in ("alice", "bob"):
        prompt, label, generated = texts(run, f"{owner}-1")
        assert prompt == f"{owner} asks something private"
        assert label == f"{owner}'s question" and generated


def test_a_visitor_recording_holds_only_their_text(recordings):
    _, alice = recordings
    assert alice.header["text"] == "own"
    prompt, label, generated = texts(alice, "alice-1")
    assert prompt == "alice asks something private" and label == "alice's question" and generated
    assert texts(alice, "bob-1") == (None, None, "")
    bob_tokens = [t for e in alice.events if e["request_id"] == "bob-1" for t in e["token_ids"]]
    assert bob_tokens and set(bob_tokens) == {HIDDEN_TOKEN}
    assert all(r["sampled"].get("bob-1", HIDDEN_TOKEN) == HIDDEN_TOKEN for r in alice.records)
    assert {s["request_id"] for r in alice.records for s in r["segments"]} == {"alice-1", "bob-1"}


def test_app_record_flag_writes_the_whole_run_until_shutdown(tiny_model_dir, tmp_path):
    import app as dashboard
    from engine import SamplingParams

    from support.server import BackgroundServer

    path = tmp_path / "run.jsonl.gz"
    args = dashboard.build_parser().parse_args(
        ["--model", tiny_model_dir, "--num-kv-blocks", "64", "--record", str(path)])
    app, llm, _ = dashboard.create_app(args)
    assert path.exists() and app.state.recorder.recording == [RUN]  # subscribed before loading
    with BackgroundServer(app):
        llm.wait_ready(120)
        llm.add_request("hello there", SamplingParams(max_tokens=3, ignore_eos=True)).collect()
    trace = load_trace(path)  # complete: the shutdown wrote the end line
    assert trace.header["text"] == "full" and len(trace.records) >= 3
    assert trace.events[0]["prompt"] == "hello there"
