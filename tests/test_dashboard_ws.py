"""The dashboard server end to end over its websocket (``websockets`` client, tiny model)."""
import asyncio
import threading
import urllib.request

import pytest

import app as dashboard
from engine.telemetry import validate_record
from viz.live.identity import COOKIE, new_visitor_id
from viz.ui.firing import Knobs, plan_shot
from viz.ui.presets import load_presets
from viz.ui.static import ASSETS
from viz.ui.strings import unmarked

from support.server import BackgroundServer
from support.viewers import ws_messages

VISITOR = new_visitor_id()


def start(model: str, *flags: str):
    args = dashboard.build_parser().parse_args(["--model", model, "--num-kv-blocks", "256", *flags])
    app, llm, hub = dashboard.create_app(args)
    return BackgroundServer(app), llm, hub, app


@pytest.fixture(scope="module")
def dashboard_server(tiny_model_dir):
    server, llm, _, app = start(tiny_model_dir)
    with server:
        llm.wait_ready(120)
        yield server, llm, app


def test_frames_carry_valid_records_of_the_fired_requests(dashboard_server):
    server, llm, app = dashboard_server
    owner = app.state.identity.owner({COOKIE: VISITOR})
    library = load_presets()
    planned = plan_shot(library, library.presets["article"], Knobs(3, 12, 0.0, 0),
                        llm.tokenizer)
    for item in planned:
        item.params.max_tokens = min(item.params.max_tokens, 16)
    ids = [item.request_id for item in planned]

    def all_finished(messages):
        return set(ids) <= {e["request_id"] for m in messages if m["type"] == "frame"
                            for e in m["events"] if e.get("finished")}

    async def watch():
        connected = {"owner": threading.Event(), "stranger": threading.Event()}  # snapshot received
        owner_view = asyncio.create_task(
            ws_messages(server.url, all_finished, 90, VISITOR, action=connected["owner"].set))
        stranger_view = asyncio.create_task(
            ws_messages(server.url, all_finished, 90, action=connected["stranger"].set))
        both = await asyncio.to_thread(lambda: all(e.wait(30) for e in connected.values()))
        assert both, "both viewers are connected before the shot"
        await asyncio.to_thread(app.state.firing.fire, planned, owner)
        return await owner_view, await stranger_view

    mine, theirs = asyncio.run(watch())
    assert mine[0]["type"] == "snapshot" and mine[0]["status"]["state"] == "ready"
    frames = [m for m in mine if m["type"] == "frame"]
    records = [r for f in frames for r in f["records"]]
    assert frames and records  # (a tiny model may finish the whole shot within one 40 ms frame)
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
    server, llm, _, _ = start(str(tmp_path / "no-such-model"))
    with server:
        with pytest.raises(RuntimeError):
            llm.wait_ready(30)
        assert urllib.request.urlopen(server.url + "/", timeout=30).status == 200
        [snapshot] = asyncio.run(ws_messages(server.url, bool, 10))
    assert snapshot["status"]["state"] == "failed" and "no-such-model" in snapshot["status"]["error"]


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


def test_the_gradio_page_gives_the_visitor_whose_shots_they_read(dashboard_server):
    """The first request is Gradio's page: it sets the cookie; a Fire through Gradio's own
    API with that cookie is that visitor's, on the stream and after a reload alike."""
    from gradio_client import Client

    server, _, _ = dashboard_server
    with urllib.request.urlopen(server.url + "/", timeout=30) as page:
        cookie = page.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    visitor = cookie.split(";")[0].split("=", 1)[1]
    client = Client(server.url, headers={"Cookie": f"{COOKIE}={visitor}"}, verbose=False)
    fired = client.predict("chat", "a question of my own", 1, 4, 0.0, 0, api_name="/fire")
    rid = unmarked(fired).split(": ")[-1].split(" · ")[0]
    client.close()

    def finished(messages):
        return any(e["request_id"] == rid and e.get("finished")
                   for m in messages for e in m.get("requests", []) + m.get("events", []))

    mine = asyncio.run(ws_messages(server.url, finished, 60, visitor))
    reload = asyncio.run(ws_messages(server.url, bool, 10, visitor))
    stranger = asyncio.run(ws_messages(server.url, bool, 10, new_visitor_id()))
    entry = next(e for e in reload[0]["requests"] if e["request_id"] == rid)
    assert finished(mine) and entry["mine"] and entry["label"] == "a question of my own"
    other = next(e for e in stranger[0]["requests"] if e["request_id"] == rid)
    assert not other["mine"] and other["label"] is None and other["text"] == ""


def test_stopping_the_server_removes_every_engine_subscription(tiny_model_dir, monkeypatch):
    from engine import AsyncLLM

    live = []

    def counted(method):
        def subscribe(self, callback):
            unsubscribe = method(self, callback)
            live.append(callback)

            def remove():
                live.remove(callback)
                unsubscribe()
            return remove
        return subscribe

    monkeypatch.setattr(AsyncLLM, "subscribe", counted(AsyncLLM.subscribe))
    monkeypatch.setattr(AsyncLLM, "subscribe_events", counted(AsyncLLM.subscribe_events))
    server, llm, _, _ = start(tiny_model_dir)
    with server:
        llm.wait_ready(120)
        assert any(c.__module__.startswith("viz.") for c in live)  # the hub watches the engine
    assert [c for c in live if c.__module__.startswith("viz.")] == []


@pytest.mark.parametrize("parser", ["live", "replay"])
def test_help_states_each_default_once_and_never_none(parser):
    import re

    build = dashboard.build_parser if parser == "live" else dashboard.build_replay_parser
    text = " ".join(build().format_help().split())
    options = re.split(r" (?=--[a-z])", text.split("options:", 1)[1])
    for option in options:
        assert option.count("(default") <= 1, option
        assert "(default: None)" not in option and "(default: False)" not in option, option
