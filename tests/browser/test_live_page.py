"""The live dashboard in headless Chromium (tiny model): the article's preset on a paused engine,
stepped; the counts everyone shows; identity across a reload; the SSE fallback."""
from __future__ import annotations

import pytest
from chromium import chromium, debug, needs_chromium, wait_for
from live import choose_preset, fire, live_dashboard, open_page, presenter, step
from truth import check_views, shows

pytestmark = needs_chromium
MAX_STEPS = 40
RUNNING, WAITING = {"prefilling", "decoding"}, {"waiting", "preempted"}


@pytest.fixture(scope="module")
def live(tiny_model_dir):
    with live_dashboard(tiny_model_dir) as live:
        yield live


@pytest.fixture(scope="module")
def page(live):
    with chromium(1366, 768) as driver:
        open_page(driver, live)
        yield driver


def header_counts(driver) -> dict | None:
    data = driver.execute_script(
        "const e = document.querySelector('#bs-status .bs-status-counts'); return e ? {...e.dataset} : null;")
    return {k: int(v) for k, v in data.items()} if data else None


def counts_everywhere(driver, live) -> dict:
    """What the header, the cards and /metrics say is waiting and running now."""
    cards = [state for _, state in debug(driver)["cards"]]
    metrics = live.metrics()
    header = header_counts(driver) or {}
    return {
        "header": (header.get("waiting"), header.get("running")),
        "cards": (sum(s in WAITING for s in cards), sum(s in RUNNING for s in cards)),
        "metrics": (int(metrics["batchscope_requests_waiting"]), int(metrics["batchscope_requests_running"])),
    }


def counts_when_settled(driver, live, moment: str) -> dict:
    """The three counts once they agree, or as they stand after 5 s of disagreeing."""
    seen = {"moment": moment}

    def agree() -> bool:
        seen.update(counts_everywhere(driver, live))
        return len({v for k, v in seen.items() if k != "moment"}) == 1

    try:
        wait_for(driver, agree, "the counts to agree", 5)
    except AssertionError:
        pass
    return seen


RUN: dict = {"records": [], "counts": []}  # the article run, shared by the tests below


def test_article_preset_stepped_on_a_paused_engine_draws_every_step_truly(page, live):
    presenter(page, "pause")
    wait_for(page, lambda: (debug(page)["status"] or {}).get("paused"), "the engine to pause")
    choose_preset(page, "article")
    ids = fire(page)
    assert [rid.rstrip("0123456789") for rid in ids] == ["A", "B", "C"]
    RUN["counts"].append(counts_when_settled(page, live, "after Fire"))
    records = RUN["records"]
    finished: set[str] = set()  # a record lists a request's finish once, in the step it ends
    while len(records) < MAX_STEPS and not set(ids) <= finished:
        records.append(step(page, live))
        finished |= set(records[-1]["finished"])
        check_views(page, records[-1])
        RUN["counts"].append(counts_when_settled(page, live, f"at step {records[-1]['step']}"))
    presenter(page, "resume")
    assert len(records) >= 3


def test_header_cards_and_metrics_count_alike_at_every_moment():
    assert RUN["counts"], "the article run did not happen"
    disagree = [c for c in RUN["counts"] if len({c["header"], c["cards"], c["metrics"]}) > 1]
    assert not disagree, f"(waiting, running) differ: {disagree[:4]}"


def test_the_article_step_is_1_plus_1_plus_100_rows():
    records = RUN["records"]
    assert records, "the article run did not happen"
    article = [r for r in records if [(s["num_rows"], s["num_cached"]) for s in r["segments"]]
               == [(1, 500), (1, 200), (100, 0)]]
    assert article, [[(s["request_id"], s["num_rows"], s["num_cached"]) for s in r["segments"]]
                     for r in records[:4]]
    assert article[0]["cu_seqlens_q"] == [0, 1, 2, 102] and article[0]["seq_lens_k"] == [501, 201, 100]


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
