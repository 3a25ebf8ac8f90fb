"""The API inside the real dashboard app: its requests show up for viewers, and garbage sent to
the viewers' websocket neither breaks the server nor a stream running meanwhile."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets

import app as dashboard

from support.server import BackgroundServer

GARBAGE = [
    b"\xff\xfe\x00garbage",  # binary, invalid UTF-8
    "not json at all",
    '{"type": "subscribe", "owner": ' + '"x' * 1000 + "}",  # broken JSON
    json.dumps({"type": "reset", "records": [None] * 1000}),
    "\u0000\ud7ff" * 1000,
    "x" * 1_000_000,  # a 1 MB message
]


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    args = dashboard.build_parser().parse_args(
        ["--model", tiny_model_dir, "--num-kv-blocks", "64", "--max-model-len", "256", "--api-max-tokens", "48"])
    app, llm, _ = dashboard.create_app(args)
    with BackgroundServer(app) as running:
        llm.wait_ready(120)
        yield running, llm


async def next_json(ws, timeout: float = 10.0) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def garbage_viewers(ws_url: str) -> None:
    async with websockets.connect(f"{ws_url}?owner={'%FF' * 300}", max_size=None) as ws:
        await next_json(ws)
        for message in GARBAGE:
            await ws.send(message)
        for _ in range(500):
            await ws.send("{}")
    ws = await websockets.connect(ws_url, max_size=None)
    await ws.send(b"\x00" * 1024)
    ws.transport.abort()  # vanish without a closing handshake


async def watch_for(ws_url: str, request_id: str) -> bool:
    """Whether a viewer sees the request finish (or already listed, if it finished first)."""
    async with websockets.connect(ws_url, max_size=None) as ws:
        snapshot = await next_json(ws)
        if any(entry["request_id"] == request_id and entry.get("finished")
               for entry in snapshot["requests"]):
            return True
        for _ in range(400):
            message = await next_json(ws)
            events = message.get("events", [])
            if any(e["request_id"] == request_id and e.get("finished") for e in events):
                return True
    return False


def test_api_requests_appear_for_viewers_and_survive_websocket_garbage(server):
    running, llm = server
    ws_url = running.url.replace("http://", "ws://") + "/ws/telemetry"
    llm.set_min_step_interval(0.01)

    async def scenario():
        async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
            body = {"model": "default", "prompt": "Hello there", "max_tokens": 40, "stream": True}
            async with client.stream("POST", "/v1/completions", json=body) as stream:
                received = stream.aiter_lines()
                first = json.loads((await anext(received))[6:])
                watcher = asyncio.create_task(watch_for(ws_url, first["id"]))
                await garbage_viewers(ws_url)
                lines = [line async for line in received if line.startswith("data: ")]
            seen = await asyncio.wait_for(watcher, 30)
            health = await client.get("/healthz")
            models = await client.get("/v1/models")
        return first, lines, seen, health, models

    try:
        first, lines, seen, health, models = asyncio.run(scenario())
    finally:
        llm.set_min_step_interval(0)
    assert first["id"].startswith("cmpl-")
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "length"
    assert seen, "the API request never showed up on the telemetry websocket"
    assert health.status_code == 200 and models.json()["data"][0]["id"] == llm.engine.model_name


def test_limit_flags_reach_the_api(server):
    running, _ = server
    body = {"model": "default", "prompt": "hi", "max_tokens": 49}
    response = httpx.post(f"{running.url}/v1/completions", json=body, timeout=30)
    assert response.status_code == 400 and "limit of 48" in response.json()["error"]["message"]


def test_the_rooms_frame_budget_is_a_flag_and_a_bad_one_is_refused(capsys):
    from viz.live.hub import FRAMES_PER_S

    parser = dashboard.build_parser()
    assert parser.parse_args([]).room_frames_per_s == FRAMES_PER_S
    assert parser.parse_args(["--room-frames-per-s", "0"]).room_frames_per_s == 0  # no limit
    for bad in ("-1", "nan"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--room-frames-per-s", bad])
        assert "frames a second must be 0 (no limit) or more" in capsys.readouterr().err
