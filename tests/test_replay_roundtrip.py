"""Round trip: a recorded run replays to the same frames a live viewer received."""
from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets
from support.server import BackgroundServer
from support.viewers import serve_hub as serve

from viz.hub import TelemetryHub
from viz.privacy import PUBLIC
from viz.recording import Recorder
from viz.replay import HubReplay
from viz.trace import load_trace


async def watch(server: BackgroundServer, action, done, timeout: float = 60) -> list[dict]:
    """Connect a viewer, run ``action`` in a thread, collect messages until ``done``."""
    messages = []
    url = server.url.replace("http://", "ws://") + "/ws/telemetry"
    async with websockets.connect(url, max_size=None) as ws:
        messages.append(json.loads(await ws.recv()))  # the snapshot: connected
        await asyncio.to_thread(action)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not done(messages):
            try:
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), 1.0)))
            except TimeoutError:
                pass
    return messages


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
    path = recorder.start(owner=None)  # the Record toggle of a visitor who fired nothing
    ids = ["q0", "q1", "q2"]

    def fire():
        params = SamplingParams(max_tokens=5, temperature=0, ignore_eos=True)
        for i, rid in enumerate(ids):
            hub.claim(rid, PUBLIC, label=f"question {i}")
            llm.add_request(f"question {i}: " + "tell me more " * (4 * i), params, request_id=rid)

    with serve(hub) as server:
        messages = asyncio.run(watch(server, fire, finished(ids)))
    recorder.stop(None)
    llm.shutdown()
    return path, ids, messages


def test_replay_sends_the_frames_the_live_viewer_received(live):
    path, ids, live_messages = live
    live_records, live_events = content(live_messages)
    assert {s["kind"] for r in live_records for s in r["segments"]} >= {"prefill_chunk", "decode"}
    assert {e["label"] for e in live_events} == {"question 0", "question 1", "question 2"}
    trace = load_trace(path)
    assert [r["step"] for r in live_records] == [r["step"] for r in trace.records]
    hub = TelemetryHub(public=True)
    replay = HubReplay(trace, hub, path.name)
    try:
        replay.player.set_speed(2.0)
        with serve(hub) as server:
            messages = asyncio.run(watch(server, replay.player.play, finished(ids)))
        records, events = content(messages)
        assert records == live_records
        assert events == live_events
        status = messages[-1]["status"]
        assert status["source"] == "replay" and status["replay"]["num_iterations"] == len(records)
    finally:
        replay.close()


def test_seeking_back_resyncs_viewers_with_a_snapshot(live):
    path, ids, live_messages = live
    trace = load_trace(path)
    hub = TelemetryHub(public=True)
    replay = HubReplay(trace, hub, path.name)
    try:
        last = len(trace.records) - 1

        def scrub():
            replay.player.seek(last)
            time.sleep(0.3)
            replay.player.seek(2)

        def resynced(messages):
            return sum(m["type"] == "snapshot" for m in messages) >= 2 and \
                messages[-1]["status"]["replay"]["iteration"] == 2

        with serve(hub) as server:
            messages = asyncio.run(watch(server, scrub, resynced, timeout=20))
        snapshot = [m for m in messages if m["type"] == "snapshot"][-1]
        assert snapshot["records"][-1]["step"] == trace.records[2]["step"]
        assert [r["step"] for r in snapshot["records"]] == [r["step"] for r in trace.records[:3]]
        assert {e["request_id"] for e in snapshot["requests"]} <= set(ids)
    finally:
        replay.close()
