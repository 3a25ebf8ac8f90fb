"""One language at a time: in English mode the page shows no Chinese, in Chinese mode no English
(beyond the terms the Chinese texts themselves keep, identifiers and numbers), and both modes
show both: on the live page after a shot (controls, preset, cards, views, a refused setting and
its warning), on the replay of the shipped trace, and switched back and forth without a reload;
the exported HTML report in the language it was written in (its charts, tables and a request's
autopsy). Screenshots: out/screenshots/language_<name>_<lang>.png."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from chromium import SHOTS, chromium, debug, needs_chromium, wait_for
from live import PRESETS, choose_preset, fire, live_dashboard, open_page
from replay_app import SHIPPED, VLLM_TRACE
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from engine.config import POLICIES
from scripts import CJK, other_script, shown_strings
from viz.traces.export import to_html_report
from viz.traces.trace import load_trace

pytestmark = needs_chromium
SIZE = (1920, 1080)


def set_language(driver, lang: str) -> None:
    driver.execute_script("window.batchscope.setLanguage(arguments[0])", lang)
    driver.execute_async_script("requestAnimationFrame(() => requestAnimationFrame(arguments[0]))")


def check_modes(driver, allowed: set[str], name: str) -> None:
    for lang in ("en", "zh", "en", "both"):
        set_language(driver, lang)
        shown = shown_strings(driver)
        if lang == "both":
            assert any(CJK.search(s) for s in shown) and any(not CJK.search(s) for s in shown)
            continue
        driver.save_screenshot(str(SHOTS / f"language_{name}_{lang}.png"))
        assert other_script(shown, lang, allowed) == [], f"{name} in {lang} mode"


def refuse_a_budget(driver) -> None:
    """Type a token budget no step can hold and press Apply: the page says why, in words and in
    a warning."""
    number = driver.find_element(By.CSS_SELECTOR, "input[type=number][aria-label^='Token budget']")
    number.send_keys(Keys.CONTROL, "a")
    number.send_keys("99999999", Keys.TAB)
    driver.find_element(By.ID, "bs-apply").click()
    wait_for(driver, lambda: driver.find_elements(By.CSS_SELECTOR, ".toast-body"), "the refusal's warning")


@pytest.fixture(scope="module")
def live_page(tiny_model_dir):
    with live_dashboard(tiny_model_dir) as live, chromium(*SIZE) as driver:
        SHOTS.mkdir(parents=True, exist_ok=True)
        open_page(driver, live)
        [article] = [p for p in PRESETS if p["id"] == "article"]
        choose_preset(driver, article["label"])
        ids = fire(driver)
        wait_for(driver, lambda: all(s == "finished" for _, s in debug(driver)["cards"] if _ in ids),
                 "the shot to finish", 120)
        yield driver, live


def test_the_live_page_shows_one_language_at_a_time(live_page):
    driver, live = live_page
    refuse_a_budget(driver)
    model = Path(live.llm.model).name  # the model's name, said as it is in every language
    check_modes(driver, {"Batchscope", *POLICIES, *re.split(r"[-_. ]", model)}, "live")


def test_the_replay_shows_one_language_at_a_time(replay_server):
    with chromium(*SIZE) as driver:
        driver.get(replay_server.url + "/")
        wait_for(driver, lambda: (s := debug(driver)) and s["lastStep"] >= 0, "the replay to draw")
        header = debug(driver)["status"] or {}
        names = f"{header.get('model', '')} {replay_server.trace.name}"
        check_modes(driver, {"Batchscope", *POLICIES, *re.split(r"[-_./ ]", names)}, "replay")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", [SHIPPED[0], VLLM_TRACE], ids=["batchscope", "vllm"])
def test_the_report_is_written_in_one_language(path, lang, tmp_path):
    trace = load_trace(path)
    report = tmp_path / f"report_{lang}.html"
    report.write_text(to_html_report(trace, lang), encoding="utf-8")
    with chromium(*SIZE) as driver:
        driver.get(report.as_uri())
        wait_for(driver, lambda: driver.execute_script("return document.querySelectorAll('.main-svg').length >= 4"),
                 "the report's charts")
        driver.find_element(By.CSS_SELECTOR, "[data-autopsy]").click()
        wait_for(driver, lambda: driver.execute_script("return document.body.classList.contains('bs-panel-open')"),
                 "a request's autopsy")
        driver.save_screenshot(str(SHOTS / f"language_report_{path.name.split('-')[0]}_{lang}.png"))
        # the engine config is shown as its JSON (identifiers); the model and device are names
        shown = shown_strings(driver, skip="code")
    header = trace.header
    names = f"{header['model']['name']} {header['hardware']['device']} {header['engine'].get('policy', '')}"
    # the recording time is written as a timestamp with its zone, "2026-12-01 06:31:09 UTC"
    assert other_script(shown, lang, {"Batchscope", "UTC", *POLICIES, *re.split(r"[-_./ ]", names)}) == []
