"""The dashboard in headless Chromium: Fire fills all four views and the text panels, and an
HTML prompt stays text. Screenshots go to out/screenshots/ (or $BATCHSCOPE_SCREENSHOTS)."""
import time

import pytest
from chromium import SHOTS, chromium, debug, needs_chromium, wait_for
from live import fire, live_dashboard, open_page
from truth import VIEWS

XSS = "<img src=x onerror=alert(1)>"
pytestmark = needs_chromium


@pytest.fixture(scope="module")
def page(tiny_model_dir):
    with live_dashboard(tiny_model_dir) as live, chromium(1920, 1080) as driver:
        open_page(driver, live)
        yield driver


def panel(driver, rid: str, part: str) -> str:
    return driver.execute_script(
        "const p = [...document.querySelectorAll('#bs-texts .bs-req')]"
        ".find(e => e.dataset.rid === arguments[0]);"
        "return p ? p.querySelector(arguments[1]).textContent : null;", rid, part)


def test_fire_fills_the_four_views_and_the_text_panels(page):
    ids = fire(page)
    assert ids and all(ids)
    state = wait_for(page, lambda: (s := debug(page)) and all(
        set(ids) <= set(s["seen"][view]) for view in ("layout", "blocks", "attention", "timing"))
        and all(s["texts"].get(rid) for rid in ids) and s, "the fired requests in every view", 120)
    for view in VIEWS:
        traces = page.execute_script(
            "const d = document.getElementById(arguments[0]); return d && d.data ? d.data.length : 0;",
            view)
        assert traces > 0, view
    for rid in ids:
        assert panel(page, rid, ".bs-req-text"), rid
        assert panel(page, rid, ".bs-rid") == rid
    assert state["status"]["viewers"] >= 1
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.save_screenshot(str(SHOTS / "dashboard.png"))


def test_an_html_prompt_is_shown_as_text_and_runs_nothing(page):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    box = page.find_element(By.CSS_SELECTOR, "#bs-prompt textarea")
    box.clear()
    box.send_keys(XSS)
    ids = fire(page)
    wait_for(page, lambda: all(panel(page, rid, ".bs-req-prompt") == XSS for rid in ids),
             lambda: f"the typed prompt in the panels of {ids}; they show "
                     f"{ {rid: panel(page, rid, '.bs-req-prompt') for rid in ids} }")
    time.sleep(1.0)  # give an injected onerror handler time to fire, if there were one
    with pytest.raises(NoAlertPresentException):
        _ = page.switch_to.alert.text
    assert page.execute_script("return document.querySelectorAll('#bs-texts img').length") == 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.save_screenshot(str(SHOTS / "html_prompt.png"))
