"""Round trip: a recorded run replays to the same frames a live viewer received."""
from __future__ import annotations

import asyncio
import time

import pytest

from viz.live.hub import TelemetryHub
from viz.live.privacy import PUBLIC
from viz.sources.replay_channels import Playback
from viz.traces.recording import Recorder
from viz.traces.trace import load_trace

from support.server import BackgroundServer
from support.viewers import serve_hub as serve
from support.viewers import ws_messages


def watch(server: BackgroundServer, action, done, timeout: float = 60) -> list[dict]:
    """Connect a viewer, run ``action`` in a thread once it is connected, collect messages
    until ``done``."""
    return asyncio.run(ws_messages(server.url, done, timeout, action=action))


def content(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """The records and events the viewer was sent, in order (frame boundaries depend on
    timing, their content must not)."""
    frames = [m for m in messages if m["type"] == "frame"]
    return [r for f in frames for r in f["records"]], [e for f in frames for e in f["events"]]


def finished(ids):
    return lambda messages: set(ids) <= {e["request_id"] for e in content(messages)[1]
                                         if e["finished"]}


@pytest.fixture(scope="module")
def live(tiny_model_dir, tmp_path_factory):
    from engine import AsyncLLM, SamplingParams

    llm = AsyncLLM(tiny_model_dir, max_num_batched_tokens=24, num_kv_blocks=64)
    llm.wait_ready(120)
    llm.set_min_step_interval(0.06)  # > one frame interval, so no frame coalesces records away
    hub = TelemetryHub()
    hub.attach(llm)
    recorder = Recorder(llm, hub, tmp_path_factory.mktemp("roundtrip"))
    path = recorder.start("tab", owner=None)  # the Record toggle of a visitor who fired nothing
    ids = ["q0", "q1", "q2"]

    def fire():
        params = SamplingParams(max_tokens=5, temperature=0, ignore_eos=True)
        for i, rid in enumerate(ids):
            hub.claim(rid, PUBLIC, label=f"question {i}")
            llm.add_request(f"question {i}: " + "tell me more " * (4 * i), params, request_id=rid)

    with serve(hub) as server:
        messages = watch(server, fire, finished(ids))
    recorder.stop("tab")
    llm.shutdown()
    return path, ids, messages


def test_replay_sends_the_frames_the_live_viewer_received(live):
    path, ids, live_messages = live
    live_records, live_events = content(live_messages)
    assert {s["kind"] for r in live_records for s in r["segments"]} >= {"prefill_chunk", "decode"}
    assert {e["label"] for e in live_events} == {"question 0", "question 1", "question 2"}
    trace = load_trace(path)
    assert [r["step"] for r in live_records] == [r["step"] for r in trace.records]
    replay = Playback.of(trace, path.name)
    try:
        replay.source.player.set_speed(2.0)
        replay.source.player.seek(-1)  # from before the first iteration, as the live viewer
        replay.hub.tick()
        with serve(replay.hub) as server:
            messages = watch(server, replay.source.player.play, finished(ids))
        records, events = content(messages)
        assert records == live_records
        assert events == live_events
        status = messages[-1]["status"]
        assert status["source"] == "replay" and status["replay"]["num_iterations"] == len(records)
    finally:
        replay.source.close()


def test_seeking_back_resyncs_viewers_with_a_snapshot(live):
    path, ids, _ = live
    trace = load_trace(path)
    replay = Playback.of(trace, path.name)
    player = replay.source.player
    try:
        last = len(trace.records) - 1

        def scrub():
            player.seek(last)
            time.sleep(0.3)
            player.seek(2)

        def resynced(messages):
            return sum(m["type"] == "snapshot" for m in messages) >= 2 and \
                messages[-1]["status"]["replay"]["iteration"] == 2

        with serve(replay.hub) as server:
            messages = watch(server, scrub, resynced, timeout=20)
        snapshot = [m for m in messages if m["type"] == "snapshot"][-1]
        assert snapshot["records"][-1]["step"] == trace.records[2]["step"]
        assert [r["step"] for r in snapshot["records"]] == [r["step"] for r in trace.records[:3]]
        assert {e["request_id"] for e in snapshot["requests"]} <= set(ids)
    finally:
        replay.source.close()
