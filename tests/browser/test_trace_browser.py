"""Traces in a real browser and a real process: ``python app.py --replay`` (no torch) in
headless Chromium, stepped and scrubbed; the exported HTML report drawn offline."""
from __future__ import annotations

import gzip
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from chromium import HAVE_CHROMIUM, ROOT, chromium, debug, drawn, scrub, wait_for
from live import fire, live_dashboard, open_page
from replay_app import VLLM_TRACE, replay_app
from truth import VIEWS, assert_texts_readable

from viz.traces.export import summarize, to_html_report
from viz.traces.trace import Trace, TraceEntry, load_trace, write_trace

SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.jsonl*"))


@pytest.fixture(scope="module")
def trace():
    assert SHIPPED, "assets/traces/ holds no trace"
    return load_trace(SHIPPED[0])


def test_replay_process_runs_without_torch(replay_server):
    maps = Path(f"/proc/{replay_server.process.pid}/maps").read_text()
    assert "libtorch" not in maps and "torch/lib" not in maps
    assert replay_server.startup_s < 60  # seconds, not the minutes of a model load


def test_a_truncated_trace_stops_replay_with_the_line(tmp_path):
    with gzip.open(SHIPPED[0], "rt") as source:
        head = [next(source) for _ in range(4)]
    broken = tmp_path / "cut.jsonl"
    broken.write_text("".join(head[:3]) + head[3][:100])
    done = subprocess.run([sys.executable, "app.py", "--replay", str(broken)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "error: cannot replay: " in done.stderr
    assert "cut.jsonl: line 4: truncated: the last line is incomplete" in done.stderr


@pytest.fixture(scope="module")
def browser():
    if not HAVE_CHROMIUM:
        pytest.skip("headless Chromium and chromedriver are not installed (make browser)")
    with chromium(1600, 1000) as driver:
        yield driver


def shown_step(driver) -> int | None:
    state = debug(driver)
    return state["lastStep"] if state and state["connected"] else None


def views_with_data(driver) -> list[str]:
    return driver.execute_script(
        "return arguments[0].filter(id => { const d = document.getElementById(id);"
        " return d && d.data && d.data.length > 0; });", VIEWS)


def test_replay_dashboard_steps_scrubs_and_plays(replay_server, browser, trace):
    from selenium.webdriver.common.by import By

    steps = [r["step"] for r in trace.records]
    browser.get(replay_server.url + "/")
    wait_for(browser, lambda: shown_step(browser) == steps[0], "the first iteration")
    wait_for(browser, lambda: len(views_with_data(browser)) == len(VIEWS), "all four views")
    assert debug(browser)["status"]["source"] == "replay"

    browser.find_element(By.ID, "bs-replay-step").click()
    wait_for(browser, lambda: shown_step(browser) == steps[1], "a step")
    position = browser.find_element(By.ID, "bs-replay-position")
    wait_for(browser, lambda: f"iteration 2 / {len(steps)}" in position.text, "the position")

    scrub(browser, 150)
    wait_for(browser, lambda: shown_step(browser) == steps[150], "scrubbing forward")
    texts = debug(browser)["texts"]
    assert texts and any(texts.values())  # the text panels replay the generated text
    scrub(browser, 20)
    wait_for(browser, lambda: shown_step(browser) == steps[20], "scrubbing back")
    assert views_with_data(browser) == VIEWS

    # The slowest speed, so the trace (about 15 s at 1x) is surely still playing when the pause
    # lands, even when a busy machine's browser reads its frames seconds late.
    browser.execute_script(
        "const s = document.getElementById('bs-replay-speed'); s.value = '0.25';"
        "s.dispatchEvent(new Event('change', {bubbles: true}));")
    browser.find_element(By.ID, "bs-replay-play").click()
    wait_for(browser, lambda: (shown_step(browser) or 0) > steps[22], "playing at 0.25x")
    replay = wait_for(browser, lambda: debug(browser)["status"]["replay"], "the replay status")
    assert replay["speed"] == 0.25
    browser.find_element(By.ID, "bs-replay-play").click()  # now "Pause"
    # The status that says "paused" comes after every frame sent before the pause.
    wait_for(browser, lambda: not debug(browser)["status"]["replay"]["playing"], "the pause")
    paused_at = shown_step(browser)
    assert steps[22] < paused_at < steps[-1]  # paused mid-trace, not at its end
    time.sleep(1.0)
    assert shown_step(browser) == paused_at


def with_emoji(trace: Trace) -> Trace:
    """``trace`` with an emoji (two UTF-16 units, one Python character) led into each delta's text."""
    def edit(entry: TraceEntry) -> TraceEntry:
        if entry.kind != "event" or entry.data["kind"] != "delta" or not entry.data["text"]:
            return entry
        return TraceEntry(entry.kind, {**entry.data, "text": "\U0001F600" + entry.data["text"]})
    return Trace(trace.header, [edit(e) for e in trace.entries])


def panel_texts(driver) -> dict[str, str]:
    return driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#bs-texts .bs-req')]"
        ".map(p => [p.dataset.rid, p.querySelector('.bs-req-text').textContent]));")


def test_text_after_an_emoji_plays_into_the_panels_whole(trace, browser, tmp_path):
    from selenium.webdriver.common.by import By

    emoji = with_emoji(trace)
    write_trace(tmp_path / "emoji.jsonl", emoji)
    texts: dict[str, str] = {}
    for e in emoji.events:
        if e["kind"] == "delta":
            texts[e["request_id"]] = texts.get(e["request_id"], "") + e["text"]
    with replay_app(tmp_path / "emoji.jsonl", tmp_path) as server:
        browser.get(server.url + "/")
        wait_for(browser, lambda: shown_step(browser) == trace.records[0]["step"], "the first iteration")
        browser.execute_script(
            "const s = document.getElementById('bs-replay-speed'); s.value = '8';"
            "s.dispatchEvent(new Event('change', {bubbles: true}));")
        browser.find_element(By.ID, "bs-replay-play").click()
        wait_for(browser, lambda: shown_step(browser) == trace.records[-1]["step"], "the last iteration", 120)
        # a request's last deltas may come a frame after the last record
        wait_for(browser, lambda: (shown := panel_texts(browser)) and all(
            text == texts[rid] for rid, text in shown.items()),
            lambda: f"each panel's whole text; shown: {panel_texts(browser)}", 30)


def row_order_notes(driver) -> list[str] | None:
    """The token layout's notes on its row order, once it draws a step (None before)."""
    figure = drawn(driver, "drawnFigure", "bs-token-layout")
    if not figure or not figure["traces"]:
        return None
    return [a["text"] for a in figure["annotations"] if "scheduler" in a["text"]]


def test_rows_in_the_scheduler_s_order_are_said_so_in_the_token_layout(vllm_replay_server, browser, tmp_path):
    """vLLM's records are in the order its model runner packed the rows: no note. The same
    trace with every record in the scheduler's order (a runner that did not report its order):
    the token layout says so beside its budget strip, readable at the page's size."""
    browser.get(vllm_replay_server.url + "/")
    packed = wait_for(browser, lambda: (notes := row_order_notes(browser)) is not None and [notes],
                      "the first step drawn")
    assert packed == [[]]
    scheduled = load_trace(VLLM_TRACE)
    for record in scheduled.records:
        record["source"]["row_order"] = "scheduled"
    write_trace(tmp_path / "scheduled.jsonl", scheduled)
    with replay_app(tmp_path / "scheduled.jsonl", tmp_path) as server:
        browser.get(server.url + "/")
        notes = wait_for(browser, lambda: row_order_notes(browser), "the row-order note")
        assert notes == ["rows in the scheduler's order · 行按调度器的顺序"]
        assert_texts_readable(browser, "rows in the scheduler's order", ["bs-token-layout"])


def test_html_report_draws_its_charts_offline(trace, tmp_path, browser):
    path = tmp_path / "report.html"
    path.write_text(to_html_report(trace), encoding="utf-8")
    browser.get(path.as_uri())
    charts = ["timing", "layout", "timeline", "pool"]
    drawn = ("return arguments[0].filter(id => { const el = document.getElementById(id);"
             " return el && el.data && el.data.length && el.querySelector('.main-svg'); });")
    wait_for(browser, lambda: browser.execute_script(drawn, charts) == charts, "the charts")
    bars = browser.execute_script("return document.querySelectorAll('#timing .bars .point path').length")
    assert bars >= len(trace.records)
    rows = browser.execute_script("return document.querySelectorAll('#requests tr').length")
    assert rows == summarize(trace).num_requests + 1



def test_record_toggle_records_the_visitors_run_for_download(browser, tiny_model_dir):
    from selenium.webdriver.common.by import By

    with live_dashboard(tiny_model_dir) as live:
        open_page(browser, live)
        status = browser.find_element(By.ID, "bs-presenter-status")
        toggle = browser.find_element(By.CSS_SELECTOR, "#bs-record input[type=checkbox]")
        download = browser.find_element(By.ID, "bs-download")
        assert not download.is_enabled()
        toggle.click()
        wait_for(browser, lambda: "Recording" in status.text, "the recording to start")
        ids = fire(browser)
        wait_for(browser, lambda: all(state(browser, rid) == "finished" for rid in ids),
                 "the shot to finish", timeout=120)
        toggle.click()
        wait_for(browser, lambda: "Recorded" in status.text and download.is_enabled(),
                 "the download button")
        name = next(word for word in status.text.split() if word.endswith(".jsonl.gz:"))[:-1]
        # read while the server runs: it deletes its temporary recordings when it stops
        [path] = Path(tempfile.gettempdir()).glob(f"batchscope-traces-*/{name}")
        recorded = load_trace(path)
    assert recorded.header["text"] == "own"
    arrivals = {e["request_id"]: e for e in recorded.events if e["kind"] == "arrival"}
    assert set(ids) <= set(arrivals) and all(arrivals[rid]["prompt"] for rid in ids)


def state(driver, rid: str) -> str | None:
    return driver.execute_script(
        "const p = [...document.querySelectorAll('#bs-texts .bs-req')]"
        ".find(e => e.dataset.rid === arguments[0]); return p ? p.dataset.state : null;", rid)
