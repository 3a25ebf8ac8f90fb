"""The engine thread dies while a visitor watches (tiny model): the page's banner says the
engine stopped, with the cause, and the visitor's requests end with that error in their cards."""
from __future__ import annotations

from chromium import chromium, debug, needs_chromium, wait_for
from live import fire, live_dashboard, open_page

from support.faults import kill_on_next_step

pytestmark = needs_chromium
CAUSE = "the engine thread was killed"


def banner(driver) -> dict:
    return driver.execute_script(
        "const b = document.getElementById('bs-banner');"
        "return {hidden: b.hidden, failed: b.classList.contains('bs-failed'),"
        " text: b.querySelector('.bs-banner-text').textContent};")


def card_texts(driver, ids: list[str]) -> dict[str, str | None]:
    return driver.execute_script(
        "const cards = [...document.querySelectorAll('#bs-texts .bs-req')];"
        "return Object.fromEntries(arguments[0].map(rid => {"
        " const c = cards.find(e => e.dataset.rid === rid);"
        " return [rid, c && c.dataset.state === 'finished' ? c.querySelector('.bs-req-text').textContent : null];"
        "}));", ids)


def test_a_dead_engine_thread_shows_in_the_banner_with_its_cause(tiny_model_dir, monkeypatch):
    with live_dashboard(tiny_model_dir) as live, chromium(1366, 768) as driver:
        open_page(driver, live)
        assert banner(driver)["hidden"]
        kill_on_next_step(live.llm, monkeypatch)
        ids = fire(driver)
        shown = wait_for(driver, lambda: (b := banner(driver)) and not b["hidden"] and b,
                         lambda: f"the dead-engine banner, not {banner(driver)}")
        assert shown["failed"] and shown["text"].startswith("The engine stopped"), shown
        assert CAUSE in shown["text"], shown
        assert debug(driver)["status"]["state"] == "dead"
        texts = wait_for(driver, lambda: (t := card_texts(driver, ids)) and all(t.values()) and t,
                         lambda: f"every fired card finished, not {card_texts(driver, ids)}")
        assert all(CAUSE in text for text in texts.values()), texts
