"""The solo check in headless Chromium (tiny model): a visitor's finished card checks itself
against a solo run and says the answer; a stranger's view of the card offers no check."""
from __future__ import annotations

import pytest
from chromium import chromium, debug, needs_chromium, wait_for
from live import choose_preset, fire, live_dashboard, open_page

pytestmark = needs_chromium
SOLO_ROW = ("const c = [...document.querySelectorAll('#bs-texts .bs-req')].find(e => e.dataset.rid === arguments[0]);"
            "const r = c && c.querySelector('.bs-solo');"
            "return r ? {hidden: r.hidden, button: r.querySelector('.bs-solo-button').textContent,"
            " text: r.querySelector('.bs-solo-text').textContent} : null;")


@pytest.fixture(scope="module")
def live(tiny_model_dir):
    with live_dashboard(tiny_model_dir) as live:
        yield live


def solo_row(driver, rid: str) -> dict | None:
    return driver.execute_script(SOLO_ROW, rid)


def test_a_finished_card_checks_itself_against_a_solo_run(live):
    from selenium.webdriver.common.by import By

    with chromium(1366, 768) as page:
        open_page(page, live)
        choose_preset(page, "chat")
        ids = fire(page)
        wait_for(page, lambda: all(dict(debug(page)["cards"]).get(rid) == "finished" for rid in ids),
                 "every fired request to finish")
        rid = ids[0]
        row = wait_for(page, lambda: (r := solo_row(page, rid)) and not r["hidden"] and r, "the solo button")
        assert row["button"].startswith("Check against a solo run")
        page.find_element(By.CSS_SELECTOR, f'#bs-texts .bs-req[data-rid="{rid}"] .bs-solo-button').click()
        answer = wait_for(page, lambda: "batch invariance off" in (t := solo_row(page, rid)["text"]) and t,
                          lambda: f"the solo check's answer, not {solo_row(page, rid)}", 150)
        assert answer.startswith(("same as alone", "first differs at token")), answer
        assert solo_row(page, rid)["button"].startswith("Check again")
        with chromium(1366, 768) as stranger:
            open_page(stranger, live)
            seen = wait_for(stranger, lambda: solo_row(stranger, rid), "the card for a stranger")
            assert seen["hidden"]
