"""Replay playback per viewer (``app.py --replay``): one viewer scrubbing moves nobody else;
a seek brings the full history a live viewer would have had; ``--shared-view`` shares one."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import websockets

import app as dashboard
from viz.traces.trace import load_trace

from support.server import BackgroundServer

TRACE = min((Path(__file__).resolve().parent.parent / "assets" / "traces").glob("*.jsonl*"))
HISTORY = 40


def replay_server(*flags: str) -> BackgroundServer:
    args = dashboard.build_replay_parser().parse_args(["--replay", str(TRACE), *flags])
    app, _ = dashboard.create_replay_app(args)
    return BackgroundServer(app)


async def until(ws, done, limit: int = 200) -> dict:
    for _ in range(limit):
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if done(message):
            return message
    raise AssertionError("the expected message never came")


def at(iteration: int):
    return lambda m: m.get("status", {}).get("replay", {}).get("iteration") == iteration


async def two_viewers(url: str) -> tuple[dict, dict, dict, dict]:
    """A scrubs to 120 and steps; B is left alone. Returns A's and B's messages after."""
    ws_url = url.replace("http://", "ws://") + "/ws/telemetry"
    async with websockets.connect(ws_url, max_size=None) as a, \
            websockets.connect(ws_url, max_size=None) as b, httpx.AsyncClient() as http:
        first_a, first_b = json.loads(await a.recv()), json.loads(await b.recv())
        viewer = first_a["viewer"]
        seek = await http.post(f"{url}/replay/seek", params={"viewer": viewer, "value": 120})
        step = await http.post(f"{url}/replay/step", params={"viewer": viewer})
        assert seek.status_code == step.status_code == 200 and step.json()["iteration"] == 121
        snapshot_a = await until(a, lambda m: m["type"] == "snapshot" and at(121)(m)
                                 or m["type"] == "frame" and at(121)(m))
        later_b = await until(b, lambda m: m["type"] == "frame")
        return first_a, first_b, snapshot_a, later_b


def test_each_viewer_has_its_own_playback_starting_paused_on_the_first_iteration():
    with replay_server() as server:
        first_a, first_b, after_a, later_b = asyncio.run(two_viewers(server.url))
    for first in (first_a, first_b):
        replay = first["status"]["replay"]
        assert replay["iteration"] == 0 and not replay["playing"]
        assert [r["step"] for r in first["records"]] == [load_trace(TRACE).records[0]["step"]]
    assert first_a["viewer"] != first_b["viewer"]
    assert at(121)(after_a)
    assert later_b["status"]["replay"]["iteration"] == 0  # B did not move


def test_a_seek_restores_the_full_history_a_live_viewer_would_have():
    trace = load_trace(TRACE)

    async def seek(url: str) -> dict:
        ws_url = url.replace("http://", "ws://") + "/ws/telemetry"
        async with websockets.connect(ws_url, max_size=None) as ws, httpx.AsyncClient() as http:
            viewer = json.loads(await ws.recv())["viewer"]
            await http.post(f"{url}/replay/seek", params={"viewer": viewer, "value": 100})
            return await until(ws, lambda m: m["type"] == "snapshot" and at(100)(m))

    with replay_server() as server:
        snapshot = asyncio.run(seek(server.url))
    steps = [r["step"] for r in snapshot["records"]]
    assert steps == [r["step"] for r in trace.records[100 - HISTORY + 1:101]]


def test_controls_need_a_known_viewer():
    with replay_server() as server, httpx.Client() as http:
        assert http.post(f"{server.url}/replay/play", params={"viewer": "nobody"}).status_code == 404
        assert http.post(f"{server.url}/replay/fly", params={"viewer": "x"}).status_code == 404
        assert http.post(f"{server.url}/replay/seek").status_code == 422


def test_shared_view_replays_one_playback_for_everyone():
    async def shared(url: str) -> tuple[dict, dict]:
        ws_url = url.replace("http://", "ws://") + "/ws/telemetry"
        async with websockets.connect(ws_url, max_size=None) as a, \
                websockets.connect(ws_url, max_size=None) as b, httpx.AsyncClient() as http:
            viewer = json.loads(await a.recv())["viewer"]
            json.loads(await b.recv())
            await http.post(f"{url}/replay/seek", params={"viewer": viewer, "value": 50})
            return await until(a, at(50)), await until(b, at(50))

    with replay_server("--shared-view") as server:
        seen_a, seen_b = asyncio.run(shared(server.url))
    assert seen_a["status"]["replay"] == seen_b["status"]["replay"]


@pytest.mark.parametrize("path", ["/batchscope/strings.json"])
def test_the_strings_table_is_served(path):
    with replay_server() as server:
        table = httpx.get(server.url + path).json()
    assert set(table) == {"page", "views", "report"}
    assert all(set(v) == {"en", "zh"} for v in table["page"].values())


def test_the_replay_app_is_built_without_torch():
    import subprocess
    import sys

    code = ("import sys, app; app.create_replay_app(app.build_replay_parser().parse_args("
            f"['--replay', {str(TRACE)!r}])); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=TRACE.parents[2], check=True,
                         capture_output=True, text=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_a_replay_answers_healthz_and_metrics_as_a_live_server_does():
    """Monitoring pointed at a replay (a workshop's laptop) gets answers, not 404: /healthz says
    it replays, /metrics holds the whole trace's totals."""
    trace = load_trace(TRACE)
    with replay_server() as server:
        health = httpx.get(server.url + "/healthz", timeout=10)
        metrics = httpx.get(server.url + "/metrics", timeout=10)
    assert health.status_code == 200
    assert health.json() == {"status": "ready", "mode": "replay", "trace": TRACE.name,
                             "iterations": len(trace.records)}
    assert metrics.status_code == 200
    assert f"batchscope_iterations_total {float(len(trace.records))}" in metrics.text
    tokens = sum(len(r["sampled"]) for r in trace.records)
    assert f"batchscope_generation_tokens_total {float(tokens)}" in metrics.text


def test_a_trace_that_does_not_say_its_engine_version_shows_none():
    """Schema-1 records (the shipped trace) do not say which Batchscope wrote them: the header
    must not read "Batchscope 1" (the schema's number taken for a version)."""
    from viz.sources.replay import trace_info

    shipped = Path(__file__).resolve().parent.parent / "assets" / "traces" / "smollm2-135m-instruct-cpu.jsonl.gz"
    info = trace_info(load_trace(shipped))
    assert (info.engine, info.engine_version) == ("batchscope", "")


def test_an_idle_page_leaves_the_cpu_alone():
    """Gradio's queue polls every 1 ms while idle by default: 7% of a core for a page nobody
    clicks (BENCHMARKS.md, "An idle server")."""
    from viz.sources.replay_channels import ReplayChannels
    from viz.ui.page import IDLE_POLL_S, build_replay_ui

    queue = build_replay_ui(ReplayChannels(load_trace(TRACE), TRACE.name, shared=False))._queue
    assert queue.sleep_when_free == queue.progress_update_sleep_when_free == IDLE_POLL_S
