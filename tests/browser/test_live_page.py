"""The live dashboard in headless Chromium (tiny model): the article's preset on a paused engine,
stepped, each step drawn truly; every preset, and requests sent through the API, counted alike
in the header, the cards and /metrics at every moment; identity across a reload; the SSE
fallback."""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field

import pytest
from chromium import chromium, debug, needs_chromium, wait_for
from counts import counts_when_settled, disagreements
from live import PRESETS, choose_preset, fire, live_dashboard, open_page, presenter, set_knob, step
from truth import check_layout_title, check_views, shows

pytestmark = needs_chromium
MAX_STEPS = 40
MAX_TOKENS = 4  # per request of the presets counted below: a few steps each, to their finish
API_REQUESTS = 3


@pytest.fixture(scope="module")
def live(tiny_model_dir):
    with live_dashboard(tiny_model_dir) as live:
        yield live


@pytest.fixture(scope="module")
def page(live):
    with chromium(1366, 768) as driver:
        open_page(driver, live)
        presenter(driver, "pause")
        wait_for(driver, lambda: (debug(driver)["status"] or {}).get("paused"), "the engine to pause")
        yield driver


@dataclass
class Run:
    """A shot on the paused engine, stepped until its requests finished: each step's record
    and the counts everyone showed after Fire (while arrivals came in) and after each step."""

    ids: list[str]
    records: list[dict] = field(default_factory=list)
    moments: list[dict] = field(default_factory=list)


RUNS: dict[str, Run] = {}  # by preset id, "api" for the API's requests


def arrivals(page, live, preset: dict, run: Run) -> None:
    """The counts while the shot's arrivals come in (spaced ones arrive while the engine is
    paused; the article's B and C only once a step has run)."""
    deadline = time.monotonic() + preset["spacing_ms"] * preset["count"] / 1000
    run.moments.append(counts_when_settled(page, "after Fire", live.url))
    while time.monotonic() < deadline:
        time.sleep(0.3)
        run.moments.append(counts_when_settled(page, "while arriving", live.url))
    run.moments.append(counts_when_settled(page, "arrived", live.url))


def stepped(page, live, run: Run, check=lambda record: None) -> Run:
    """Step the paused engine until the run's requests finished, counting after each step."""
    ids = set(run.ids)
    finished: set[str] = set()  # a record lists a request's finish once, in the step it ends
    while len(run.records) < MAX_STEPS and not ids <= finished:
        record = step(page, live)
        run.records.append(record)
        finished |= set(record["finished"])
        check(record)
        run.moments.append(counts_when_settled(page, f"at step {record['step']}", live.url))
    assert ids <= finished, f"{sorted(ids - finished)} did not finish in {MAX_STEPS} steps"
    return run


def run_preset(page, live, preset: dict, check=lambda record: None) -> Run:
    choose_preset(page, preset["label"])
    if preset["id"] != "article":
        set_knob(page, "Max tokens", MAX_TOKENS, after=preset["max_tokens"])
    run = RUNS[preset["id"]] = Run(fire(page))
    arrivals(page, live, preset, run)
    return stepped(page, live, run, check)


def check_article_step(driver, record: dict) -> None:
    check_views(driver, record)
    check_layout_title(driver, record)


def test_article_preset_stepped_on_a_paused_engine_draws_every_step_truly(page, live):
    [article] = [p for p in PRESETS if p["id"] == "article"]
    run = run_preset(page, live, article, lambda record: check_article_step(page, record))
    assert [rid.rstrip("0123456789") for rid in run.ids] == ["A", "B", "C"]
    assert len(run.records) >= 3


def test_the_article_step_is_1_plus_1_plus_100_rows():
    records = RUNS["article"].records
    article = [r for r in records if [(s["num_rows"], s["num_cached"]) for s in r["segments"]]
               == [(1, 500), (1, 200), (100, 0)]]
    assert article, [[(s["request_id"], s["num_rows"], s["num_cached"]) for s in r["segments"]]
                     for r in records[:4]]
    assert article[0]["cu_seqlens_q"] == [0, 1, 2, 102] and article[0]["seq_lens_k"] == [501, 201, 100]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p["id"])
def test_header_cards_and_metrics_count_alike_at_every_moment(page, live, preset):
    run = RUNS.get(preset["id"]) or run_preset(page, live, preset)
    assert len(run.moments) > len(run.records) >= 2
    assert not disagreements(run.moments), f"(pending, waiting, running) differ: {disagreements(run.moments)[:4]}"


def complete(url: str, prompt: str, answers: list) -> None:
    body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": MAX_TOKENS}).encode()
    request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    answers.append(json.loads(urllib.request.urlopen(request, timeout=120).read()))


def test_requests_sent_through_the_api_count_alike_at_every_moment(page, live):
    answers: list[dict] = []
    before = set(debug(page)["requests"])
    threads = [threading.Thread(target=complete, args=(live.url, f"Question {k}: why batch?", answers))
               for k in range(API_REQUESTS)]
    for thread in threads:
        thread.start()
    fresh = wait_for(page, lambda: len(ids := set(debug(page)["requests"]) - before) == API_REQUESTS and ids,
                     "the API's requests on the page")
    assert all(rid.startswith("cmpl-") for rid in fresh)
    run = RUNS["api"] = Run(sorted(fresh), moments=[counts_when_settled(page, "after the API calls", live.url)])
    assert run.moments[0]["header"].waiting >= API_REQUESTS
    stepped(page, live, run)
    for thread in threads:
        thread.join(30)
    assert sorted(a["id"] for a in answers) == sorted(fresh)
    assert not disagreements(run.moments), f"(pending, waiting, running) differ: {disagreements(run.moments)[:4]}"


def card(driver, rid: str) -> dict | None:
    return driver.execute_script(
        "const c = [...document.querySelectorAll('#bs-texts .bs-req')].find(e => e.dataset.rid === arguments[0]);"
        "return c ? {prompt: c.querySelector('.bs-req-prompt').textContent,"
        " mine: c.classList.contains('bs-mine'), hidden: c.classList.contains('bs-hidden-text')} : null;", rid)


def test_a_reload_keeps_your_requests_text_and_a_second_visitor_sees_none(page, live):
    from selenium.webdriver.common.by import By

    prompt = "Paragraph one of my own prompt.\n\nParagraph two, <b>not bold</b>."
    box = page.find_element(By.CSS_SELECTOR, "#bs-prompt textarea")
    box.clear()
    box.send_keys(prompt)
    choose_preset(page, "chat")
    rid = fire(page)[0]
    wait_for(page, lambda: (c := card(page, rid)) and c["prompt"] == prompt, "my prompt in my card")
    page.refresh()
    open_page(page, live)
    wait_for(page, lambda: card(page, rid) == {"prompt": prompt, "mine": True, "hidden": False},
             lambda: f"my card after the reload, not {card(page, rid)}")
    with chromium(1366, 768) as stranger:
        open_page(stranger, live)
        seen = wait_for(stranger, lambda: card(stranger, rid), "the request's card for a stranger")
        assert seen["hidden"] and not seen["mine"] and prompt not in seen["prompt"]
        assert prompt not in stranger.page_source


class RefuseWebsockets:
    """A test proxy that turns every websocket upgrade away (as some proxies do)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)


def test_with_websockets_refused_all_four_views_update_over_sse(tiny_model_dir):
    with live_dashboard(tiny_model_dir, wrap=RefuseWebsockets) as live, chromium(1366, 768) as driver:
        open_page(driver, live)
        assert debug(driver)["link"] == "sse"
        ids = fire(driver)
        state = wait_for(driver, lambda: (s := debug(driver)) and all(
            set(ids) <= set(s["seen"][view]) for view in ("layout", "blocks", "attention", "timing")) and s,
            "the fired requests in every view", 120)
        assert state["link"] == "sse" and all(state["texts"].get(rid) for rid in ids)
        wait_for(driver, lambda: {s for rid, s in debug(driver)["cards"] if rid in ids} == {"finished"},
                 "the shot to finish", 120)
        wait_for(driver, lambda: shows(driver, live.last_record()), "the last step drawn in all four views")


@needs_chromium
def test_a_lowered_frame_rate_is_said_in_the_header_and_every_step_still_drawn(tiny_model_dir):
    """--room-frames-per-s 10: one viewer gets 10 frames a second, a second viewer halves it;
    the header says the rate (and why, on hover), and the views still draw the last step."""
    import asyncio

    import websockets

    options = ("--num-kv-blocks", "256", "--room-frames-per-s", "10")
    with live_dashboard(tiny_model_dir, options=options) as live, chromium(1366, 768) as driver:
        open_page(driver, live)
        def rate() -> tuple[str, str] | None:  # the header is redrawn each frame: read it in one go
            return driver.execute_script(
                "const e = document.querySelector('#bs-status .bs-status-frame-rate');"
                "return e ? [e.textContent, e.title] : null;")

        shown = wait_for(driver, lambda: (r := rate()) and "10 frames/s" in r[0] and r, "10 frames/s")
        assert "每秒 10 帧" in shown[0]  # the page's default mode shows both languages
        assert "many viewers" in shown[1]

        async def second_viewer() -> None:
            async with websockets.connect(live.url.replace("http", "ws") + "/ws/telemetry", max_size=None) as ws:
                await ws.recv()
                wait_for(driver, lambda: "5 frames/s" in (rate() or [""])[0], "5 frames/s with two viewers")

        asyncio.run(second_viewer())
        wait_for(driver, lambda: "10 frames/s" in (rate() or [""])[0], "10 frames/s again")
        ids = fire(driver)
        wait_for(driver, lambda: {s for rid, s in debug(driver)["cards"] if rid in ids} == {"finished"},
                 "the shot to finish", 120)
        wait_for(driver, lambda: shows(driver, live.last_record()), "the last step drawn in all four views")
