"""The dashboard server end to end over its websocket (``websockets`` client, tiny model)."""
import asyncio
import json
import time
import urllib.request

import pytest
import websockets

import app as dashboard
from engine.telemetry import validate_record
from viz.firing import Knobs, fire, plan_shot
from viz.presets import load_presets
from viz.web import ASSETS
from support.server import BackgroundServer

OWNER = "owner-under-test"


def start(model: str, *flags: str):
    args = dashboard.build_parser().parse_args(["--model", model, "--num-kv-blocks", "256", *flags])
    app, llm, hub = dashboard.create_app(args)
    return BackgroundServer(app), llm, hub


@pytest.fixture(scope="module")
def dashboard_server(tiny_model_dir):
    server, llm, hub = start(tiny_model_dir)
    with server:
        llm.wait_ready(120)
        yield server, llm, hub


async def collect(url: str, owner: str | None, until, timeout: float) -> list[dict]:
    query = f"?owner={owner}" if owner else ""
    messages = []
    async with websockets.connect(f"{url}/ws/telemetry{query}", max_size=None) as ws:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not until(messages):
            try:
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), 1.0)))
            except asyncio.TimeoutError:
                pass
    return messages


def test_frames_carry_valid_records_of_the_fired_requests(dashboard_server):
    server, llm, hub = dashboard_server
    ws_url = server.url.replace("http://", "ws://")
    library = load_presets()
    planned = plan_shot(library, library.presets["article"], Knobs(3, 12, 0.0, 0),
                        llm.engine.tokenizer)
    for item in planned:
        item.params.max_tokens = min(item.params.max_tokens, 16)
    ids = [item.request_id for item in planned]

    def all_finished(messages):
        return set(ids) <= {e["request_id"] for m in messages if m["type"] == "frame"
                            for e in m["events"] if e.get("finished")}

    async def watch():
        owner_view = asyncio.create_task(collect(ws_url, OWNER, all_finished, 90))
        stranger_view = asyncio.create_task(collect(ws_url, None, all_finished, 90))
        await asyncio.sleep(0.5)  # both viewers are connected before the shot
        await asyncio.to_thread(fire, llm, hub, planned, OWNER)
        return await owner_view, await stranger_view

    mine, theirs = asyncio.run(watch())
    assert mine[0]["type"] == "snapshot" and mine[0]["status"]["state"] == "ready"
    frames = [m for m in mine if m["type"] == "frame"]
    records = [r for f in frames for r in f["records"]]
    assert len(frames) >= 2 and records
    for record in records:
        validate_record(record)
    scheduled = {s["request_id"] for r in records for s in r["segments"]}
    assert set(ids) <= scheduled
    rows = [[(s["kind"], s["num_rows"]) for s in r["segments"]] for r in records]
    assert [("decode", 1), ("decode", 1), ("prefill", 100)] in rows  # the article's 102 rows
    texts = {rid: "" for rid in ids}
    for event in (e for f in frames for e in f["events"]):
        if event["kind"] == "delta" and event["request_id"] in texts:
            texts[event["request_id"]] += event["text"]
    assert all(texts.values()) and all(e["mine"] for f in frames for e in f["events"]
                                       if e["request_id"] in texts)
    hidden = [e for m in theirs if m["type"] == "frame" for e in m["events"]
              if e["request_id"] in texts]
    assert hidden and all(not e["visible"] and e["text"] == "" and e["prompt"] is None
                          for e in hidden)


def test_page_and_plotly_are_served_locally(dashboard_server):
    server, _, _ = dashboard_server
    page = urllib.request.urlopen(server.url + "/", timeout=30).read().decode()
    assert "/plotly.min.js" in page and "/batchscope/js/main.js" in page
    assert "cdn.plot.ly" not in page
    plotly_js = urllib.request.urlopen(server.url + "/plotly.min.js", timeout=30).read()
    assert len(plotly_js) > 1_000_000 and b"plotly.js v4" in plotly_js[:300]
    modules = sorted(p.relative_to(ASSETS).as_posix() for p in (ASSETS / "js").rglob("*.js"))
    client = {name: urllib.request.urlopen(f"{server.url}/batchscope/{name}", timeout=30).read()
              for name in modules}
    assert b"Plotly.react" in client["js/main.js"]
    assert not [name for name, source in client.items() if b"innerHTML" in source]


def test_a_model_that_fails_to_load_leaves_the_page_up_and_says_so(tmp_path):
    server, llm, _ = start(str(tmp_path / "no-such-model"))
    with server:
        with pytest.raises(RuntimeError):
            llm.wait_ready(30)
        assert urllib.request.urlopen(server.url + "/", timeout=30).status == 200
        [snapshot] = asyncio.run(collect(server.url.replace("http", "ws"), None, bool, 10))
    assert snapshot["status"]["state"] == "failed" and "no-such-model" in snapshot["status"]["load_error"]


def test_cli_documents_every_flag_and_honours_the_environment(monkeypatch):
    help_text = dashboard.build_parser().format_help()
    for flag in ("--model", "--host", "--port", "--block-size", "--num-kv-blocks",
                 "--max-num-batched-tokens", "--policy", "--chunked-prefill", "--prefix-caching",
                 "--shared-view", "--presenter-key"):
        assert flag in help_text
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    local = dashboard.build_parser().parse_args([])
    assert (local.host, local.port, local.model) == ("127.0.0.1", 7860, "default")
    monkeypatch.setenv("SPACE_ID", "someone/batchscope")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7861")
    space = dashboard.build_parser().parse_args(["--no-chunked-prefill", "--policy", "prefill_first"])
    assert (space.host, space.port) == ("0.0.0.0", 7861)
    config = dashboard.engine_config(space)
    assert config["enable_chunked_prefill"] is False and config["policy"] == "prefill_first"
    assert "block_size" not in config  # unset: the engine chooses per device
