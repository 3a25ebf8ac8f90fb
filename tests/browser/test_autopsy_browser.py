"""The request autopsy in headless Chromium: click a request of the article's preset (a paused
engine, stepped) and of a run that a small KV pool preempts, and of the exported report; the
drawn lane, the TTFT parts and the story must be the records'. Screenshots at 1920x1080 and
1366x768 (out/screenshots/), with no figure text cut or overlapping."""
from __future__ import annotations

import threading

import pytest
from autopsy_truth import (
    ITL,
    LANE,
    assert_no_overflow,
    click_card,
    click_segment,
    close,
    drawn_lane,
    expected_lane,
    expected_ttft,
    story,
    ttft_shown,
    wait_open,
)
from chromium import ROOT, SHOTS, chromium, debug, drawn, needs_chromium, viewport, wait_for
from live import choose_preset, fire, live_dashboard, open_page, presenter
from truth import assert_texts_readable, shows

from viz.traces.export import to_html_report
from viz.traces.trace import load_trace

pytestmark = needs_chromium
SIZES = [(1920, 1080), (1366, 768)]
MAX_STEPS = 40


class Arrivals:
    """The engine's arrival events (the time each request was handed over)."""

    def __init__(self, llm):
        self.times: dict[str, float] = {}
        self.lock = threading.Lock()
        self.unsubscribe = llm.subscribe_events(self.keep)

    def keep(self, event: dict) -> None:
        if event["kind"] == "arrival":
            with self.lock:
                self.times[event["request_id"]] = event["time"]


def step(driver, live) -> dict:
    """One step of the paused engine (through the facade: a Gradio click made while the
    previous one is still pending is dropped), once every view draws it."""
    before = live.last_record()
    live.llm.step_once()
    record = wait_for(driver, lambda: (r := live.last_record()) is not before and r, "the engine to step")
    wait_for(driver, lambda: shows(driver, record), f"step {record['step']} drawn")
    return record


def check_autopsy(driver, records: list[dict], arrival: float, rid: str) -> dict:
    """The open autopsy of ``rid`` against the records: lane, rows, TTFT parts."""
    figure = wait_open(driver, rid)
    states, rows = drawn_lane(figure)
    want_states, want_rows = expected_lane(records, rid)
    assert states == want_states, {s: (states.get(s), want_states.get(s)) for s in set(states) | set(want_states)
                                   if states.get(s) != want_states.get(s)}
    assert rows == want_rows
    shown, want = ttft_shown(driver), expected_ttft(records, arrival, rid)
    assert sum(shown["parts"].values()) == shown["total"], shown
    assert abs(shown["total"] - want["total"]) <= 0.5 + 1e-6, (shown, want)
    assert abs(shown["parts"]["prefill"] + shown["parts"]["preempted"] - want["own"]) <= 2, (shown, want)
    assert shown["parts"]["unknown"] == 0
    assert f"step {want['step']}" in shown["head"]
    return shown


@pytest.fixture(scope="module")
def article(tiny_model_dir):
    """The article's preset fired on a paused engine and stepped to the end, and the page."""
    with live_dashboard(tiny_model_dir) as live, chromium(*SIZES[0]) as driver:
        arrivals = Arrivals(live.llm)
        open_page(driver, live)
        presenter(driver, "pause")
        wait_for(driver, lambda: (debug(driver)["status"] or {}).get("paused"), "the engine to pause")
        choose_preset(driver, "article")
        ids = fire(driver)
        records = []
        while len(records) < MAX_STEPS and not set(ids) <= {rid for r in records for rid in r["finished"]}:
            records.append(step(driver, live))
        yield driver, ids, records, arrivals.times
        arrivals.unsubscribe()
        presenter(driver, "resume")


def test_article_each_request_s_lane_and_ttft_are_the_records(article):
    driver, ids, records, arrivals = article
    for rid in ids:
        click_card(driver, rid)
        shown = check_autopsy(driver, records, arrivals[rid], rid)
        assert shown["parts"]["queue"] > 0 or shown["parts"]["idle"] > 0  # the presenter stepped it
        close(driver)
    a, b, c = ids
    click_card(driver, c)
    wait_open(driver, c)
    lines = story(driver)
    shared = [text for key, text in lines if key == "autopsy.story_chunk_shared"]
    assert shared and f"with {a} 1 + {b} 1 (102 rows in all)" in shared[0], lines
    close(driver)


def test_a_click_on_a_request_s_rows_in_a_view_opens_its_autopsy(article):
    driver, ids, records, arrivals = article
    article_step = next(r for r in records if r["num_rows"] == 102)
    c = ids[2]
    assert any(s["request_id"] == c for s in article_step["segments"])
    last = records[-1]
    rid = last["segments"][0]["request_id"] if last["segments"] else ids[0]
    click_segment(driver, "bs-token-layout", rid)
    check_autopsy(driver, records, arrivals[rid], rid)
    close(driver)


def test_autopsy_screenshots_are_readable_at_both_sizes(article):
    driver, ids, records, _ = article
    click_card(driver, ids[2])
    wait_open(driver, ids[2])
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for width, height in SIZES:
            viewport(driver, width, height)
            wait_for(driver, lambda: drawn_to_panel(driver), "the autopsy drawn to its size")
            assert_texts_readable(driver, f"autopsy at {width}x{height}", [LANE, ITL])
            assert_no_overflow(driver, "#bs-autopsy")
            driver.save_screenshot(str(SHOTS / f"autopsy_{width}x{height}.png"))
    finally:
        viewport(driver, *SIZES[0])
        close(driver)


def drawn_to_panel(driver) -> bool:
    return driver.execute_script(
        "return [...document.querySelectorAll('#bs-autopsy .bs-autopsy-plot')].filter(p => !p.hidden).every(p =>"
        " p._fullLayout && Math.abs(p._fullLayout.width - p.clientWidth) <= 1);")


def test_a_preempted_request_shows_its_preemption(tiny_model_dir):
    """Checked on the page reloaded after the run: a live page's frames carry the latest records of
    each tick only, so a page that falls behind (a loaded machine) may miss steps, the preemption's
    among them, and its lane then says "unknown" there; a snapshot carries every step back to the
    oldest card's arrival (the live page's autopsy is the article's test, stepped)."""
    options = ("--num-kv-blocks", "14", "--max-num-batched-tokens", "64")
    with live_dashboard(tiny_model_dir, options=options) as live, chromium(*SIZES[1]) as driver:
        arrivals = Arrivals(live.llm)
        open_page(driver, live)
        choose_preset(driver, "chat")
        ids = fire(driver)
        wait_for(driver, lambda: {s for rid, s in debug(driver)["cards"] if rid in ids} == {"finished"},
                 "the shot to finish", 180)
        with live.lock:
            records = list(live.records)
        open_page(driver, live)
        wait_for(driver, lambda: {s for rid, s in debug(driver)["cards"] if rid in ids} == {"finished"}, "the cards")
        preempted = [rid for r in records for rid in r["preempted"]]
        assert preempted, "a 14-block pool preempted nobody"
        rid = preempted[0]
        click_card(driver, rid)
        check_autopsy(driver, records, arrivals.times[rid], rid)
        keys = [key for key, _ in story(driver)]
        assert "autopsy.story_preempted" in keys and "autopsy.story_waited_again" in keys, keys
        at = next(r["step"] for r in records if rid in r["preempted"])
        before = [r for r in records if r["step"] < at]
        blocks = next(len(r["block_tables"][rid]) for r in reversed(before) if rid in r["block_tables"])
        lost = next(r["requests"][rid]["num_computed_tokens"] for r in reversed(before) if rid in r["requests"])
        line = next(text for key, text in story(driver) if key == "autopsy.story_preempted")
        assert f"step {at}" in line and f"{blocks} KV blocks freed, {lost} computed tokens lost" in line
        arrivals.unsubscribe()
        late_viewer_sees_every_step_of_the_requests_on_screen(live, records, ids)


def late_viewer_sees_every_step_of_the_requests_on_screen(live, records: list[dict], ids: list[str]) -> None:
    """A page opened after the run gets the history back to the arrival of the oldest request a
    card shows (viz/live/history.py), not the latest 40 records only: each request's lane starts
    at its first step and nothing is said unseen."""
    first_of_latest_40 = records[-40]["step"]
    life = {rid: [r["step"] for r in records if rid in r["requests"]] for rid in ids}
    earlier = [rid for rid in ids if life[rid][0] < first_of_latest_40]
    assert earlier, life  # requests the latest 40 records alone would have cut
    with chromium(*SIZES[1]) as late:
        open_page(late, live)
        wait_for(late, lambda: set(ids) <= set(debug(late)["requests"]), "the cards")
        for rid in earlier:
            click_card(late, rid)
            wait_open(late, rid)
            assert not any("not seen by this page" in n for n in notes(late)), notes(late)
            assert min(drawn_lane(drawn(late, "drawnFigure", LANE))[0]) == life[rid][0]
            close(late)


def notes(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#bs-autopsy .bs-autopsy-note')]"
                                 ".map(n => n.textContent);")


def test_the_exported_report_opens_the_same_autopsy(tmp_path):
    trace_path = sorted((ROOT / "assets" / "traces").glob("*.jsonl*"))[0]
    trace = load_trace(trace_path)
    report = tmp_path / "report.html"
    report.write_text(to_html_report(trace), encoding="utf-8")
    records = trace.records
    arrival = next(e["time"] for e in trace.events if e["kind"] == "arrival" and e["request_id"] == "r11")
    with chromium(*SIZES[0]) as driver:
        driver.get(report.as_uri())
        wait_for(driver, lambda: driver.execute_script("return !!(window.batchscope && window.batchscope.autopsy)"),
                 "the report's autopsy module")
        driver.execute_script("document.querySelector('[data-autopsy=\"r11\"]').click();")
        wait_for(driver, lambda: driver.execute_script("return window.batchscope.autopsy.debug().open") == "r11",
                 "r11's autopsy")
        figure = wait_for(driver, lambda: drawn(driver, "drawnFigure", LANE), "r11's lane")
        assert drawn_lane(figure) == expected_lane(records, "r11")
        shown, want = ttft_shown(driver), expected_ttft(records, arrival, "r11")
        assert sum(shown["parts"].values()) == shown["total"] and abs(shown["total"] - want["total"]) <= 0.5 + 1e-6
        keys = [key for key, _ in story(driver)]
        assert keys.count("autopsy.story_recompute") == 2 and "autopsy.story_preempted" in keys
        SHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SHOTS / "report_autopsy_1920x1080.png"))


def test_in_a_replay_the_autopsy_shows_the_lane_up_to_the_step_on_screen(replay_server, records):
    from chromium import scrub

    trace = load_trace(sorted((ROOT / "assets" / "traces").glob("*.jsonl*"))[0])
    arrival = next(e["time"] for e in trace.events if e["kind"] == "arrival" and e["request_id"] == "r2")
    with chromium(*SIZES[1]) as driver:
        driver.get(replay_server.url + "/")
        wait_for(driver, lambda: (s := debug(driver)) and s["connected"] and s["lastStep"] >= 0, "the replay")
        scrub(driver, 10)
        wait_for(driver, lambda: debug(driver)["lastStep"] == records[10]["step"], "iteration 10 on screen")
        click_card(driver, "r2")
        figure = wait_open(driver, "r2")
        assert drawn_lane(figure) == expected_lane(records[:11], "r2")  # its life so far, not beyond
        shown, want = ttft_shown(driver), expected_ttft(records, arrival, "r2")
        assert sum(shown["parts"].values()) == shown["total"] and abs(shown["total"] - want["total"]) <= 0.5 + 1e-6


def test_a_vllm_trace_s_autopsy_in_replay_is_its_records(vllm_replay_server):
    """The shipped vLLM trace played to its end: the article's three requests and a chat
    question, each lane and TTFT against vLLM's records, and C's whole prefill beside A's and
    B's decodes in its story."""
    from selenium.webdriver.common.by import By

    trace = load_trace(vllm_replay_server.trace)
    records = trace.records
    arrivals = {e["request_id"]: e["time"] for e in trace.events if e["kind"] == "arrival"}
    article = next(r for r in records if r["num_rows"] == 102)
    a, b, c = (s["request_id"] for s in article["segments"])
    chat = next(rid for rid in arrivals if rid not in (a, b, c))
    with chromium(*SIZES[1]) as driver:
        driver.get(vllm_replay_server.url + "/")
        wait_for(driver, lambda: (s := debug(driver)) and s["connected"] and s["lastStep"] >= 0, "the replay")
        driver.find_element(By.ID, "bs-replay-play").click()  # at 1x: every step in frames of a few
        wait_for(driver, lambda: debug(driver)["lastStep"] == records[-1]["step"], "the replay's last step")
        for rid in (a, b, c, chat):
            click_card(driver, rid)
            check_autopsy(driver, records, arrivals[rid], rid)
            if rid == c:
                shared = [text for key, text in story(driver) if key == "autopsy.story_chunk_shared"]
                assert shared and f"with {a} 1 + {b} 1 (102 rows in all)" in shared[0], shared
            close(driver)
