"""The stage layout (``?layout=stage``, for a projector) on a live engine, read as drawn: at
1280x720 and 1920x1080 the four views, their titles and the request cards lie inside the
viewport with nothing to scroll, chart text is at least 14 px, nothing is cut or ends in "…"
(in English and in Chinese at 1280x720; in both languages at once, the page's default, too at
1920x1080: at 1280x720 their doubled labels do not all fit at 14 px). Keys: space pauses and
resumes, → steps the paused engine, ← shows an earlier step of the history (its title and
drawing are that record's), and new live steps bring back the newest; S and P take the keyboard
to slow motion and the workload, Escape gives it back. Screenshots:
out/screenshots/stage_<W>x<H>.png (the first language checked) and stage_<W>x<H>_<lang>.png."""
from __future__ import annotations

import pytest
from chromium import SHOTS, chromium, debug, drawn, needs_chromium, viewport, wait_for
from live import PRESETS, choose_preset, fire, live_dashboard
from truth import VIEWS, assert_page_text_whole, assert_texts_readable, check_layout_title, check_views, shows

pytestmark = needs_chromium
SIZES = [(1280, 720), (1920, 1080)]
LANGUAGES = {(1280, 720): ["en", "zh"], (1920, 1080): ["both", "en", "zh"]}
STEPS = 4  # presses of → on the paused engine
MIN_CHART_PX = 14
STEPPED: list[dict] = []  # the records the → presses made, for the later tests

# The boxes a presenter needs on screen, and the text of the stage outside the figures (the
# request cards' own prompt and generated text are the visitor's, not the page's).
BOXES = """
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height}; };
  const byId = (id) => document.getElementById(id);
  return {viewport: [window.innerWidth, window.innerHeight],
    scroll: [document.scrollingElement.scrollWidth, document.scrollingElement.scrollHeight],
    views: arguments[0].map((id) => box(byId(id).closest('figure'))),
    cards: [...document.querySelectorAll('#bs-texts .bs-req')].map(box), texts: box(byId('bs-texts')),
    controls: ['bs-fire', 'bs-pause', 'bs-step', 'bs-resume', 'bs-slow', 'bs-stage-keys']
      .map((id) => [id, box(byId(id))])
      .concat([['preset', box(document.querySelector('#bs-controls input[role=combobox]'))]])};"""
STAGE_TEXT = """
  const skip = '.bs-req-prompt, .bs-req-text';
  const parts = [];
  for (const id of ['bs-header-wrap', 'bs-controls', 'bs-views-wrap', 'bs-texts-wrap']) {
    const walker = document.createTreeWalker(document.getElementById(id), NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const el = node.parentElement;
      if (!el.closest(skip) && el.checkVisibility() && node.textContent.trim()) parts.push(node.textContent);
    }
  }
  return parts;"""


def open_stage(driver, live) -> None:
    driver.get(live.url + "/?layout=stage")
    wait_for(driver, lambda: (s := debug(driver)) and s["viewer"] and s["connected"]
             and (s["status"] or {}).get("state") == "ready", "the page to connect")
    assert driver.execute_script("return document.body.classList.contains('bs-stage')")


@pytest.fixture(scope="module")
def stage(tiny_model_dir):
    with live_dashboard(tiny_model_dir) as live, chromium(*SIZES[0]) as driver:
        open_stage(driver, live)
        yield driver, live


def press(driver, key: str) -> None:
    """A key pressed on whatever has the focus (as a presenter would, after a click)."""
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(key).perform()


def paused(driver) -> bool:
    return bool((debug(driver)["status"] or {}).get("paused"))


def key(name: str) -> str:
    from selenium.webdriver.common.keys import Keys

    return getattr(Keys, name)


def test_space_pauses_and_right_arrow_steps_the_paused_engine_one_step(stage):
    driver, live = stage
    press(driver, key("SPACE"))
    wait_for(driver, lambda: paused(driver) and live.llm.paused, "space to pause the engine")
    [article] = [p for p in PRESETS if p["id"] == "article"]
    choose_preset(driver, article["label"])
    fire(driver)  # the focus stays on Fire: space and the arrows must still reach the stage
    for _ in range(STEPS):
        before = len(live.records)
        press(driver, key("ARROW_RIGHT"))
        wait_for(driver, lambda b=before: len(live.records) > b, "→ to step the engine")
        record = live.last_record()
        wait_for(driver, lambda r=record: shows(driver, r), f"step {record['step']} drawn")
        assert len(live.records) == before + 1, "one press of → ran more than one step"
        STEPPED.append(record)
    assert live.llm.paused and all(r["num_rows"] for r in STEPPED)


def chart_text_sizes(driver) -> list[tuple[str, str, float]]:
    """(view, text, font size in px as drawn) of every text each view drew."""
    return [(view, text, size) for view in VIEWS for text, size in drawn(driver, "drawnTextSizes", view)]


def inside(box: dict, width: int, height: int) -> bool:
    return box["width"] > 0 and box["left"] >= -0.5 and box["top"] >= -0.5 \
        and box["right"] <= width + 0.5 and box["bottom"] <= height + 0.5


def set_language(driver, lang: str) -> None:
    """The page in ``lang``, drawn (the page draws on the next animation frame)."""
    driver.execute_script("window.batchscope.setLanguage(arguments[0])", lang)
    driver.execute_async_script("requestAnimationFrame(() => requestAnimationFrame(arguments[0]))")
    wait_for(driver, lambda: drawn(driver, "drawnToSize", VIEWS), f"the page drawn in {lang}")


def check_fits(driver, where: str) -> None:
    """The stage on one screen, its chart text at least 14 px, no text cut."""
    boxes = driver.execute_script(BOXES, VIEWS)
    width, height = boxes["viewport"]
    assert boxes["scroll"][0] <= width and boxes["scroll"][1] <= height, f"{where}: the page scrolls: {boxes['scroll']}"
    assert all(inside(b, width, height) for b in boxes["views"]), f"{where}: {boxes['views']}"
    cards = boxes["cards"]
    assert len(cards) == 3 and all(inside(b, width, height) for b in cards), f"{where}: {cards}"
    assert [name for name, b in boxes["controls"] if not inside(b, width, height)] == [], where
    small = [s for s in chart_text_sizes(driver) if s[2] < MIN_CHART_PX]
    assert not small, f"{where}: chart text under {MIN_CHART_PX} px: {small[:8]}"
    cut = [t for t in driver.execute_script(STAGE_TEXT) if "…" in t]
    cut += [text for view in VIEWS for text, _ in drawn(driver, "drawnTextSizes", view) if "…" in text]
    assert not cut, f"{where}: text cut with …: {cut}"
    assert_texts_readable(driver, where)
    assert_page_text_whole(driver, where)
    said = driver.find_element("id", "bs-stage-keys").text
    assert "Space" in said or "空格" in said, said
    assert "→" in said and "←" in said, said


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_stage_fits_one_screen_with_chart_text_of_14_px_and_nothing_cut(stage, size):
    driver, _ = stage
    assert STEPPED, "the stepping test runs first"
    viewport(driver, *size)
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for k, lang in enumerate(LANGUAGES[size]):
            set_language(driver, lang)
            name = f"stage_{size[0]}x{size[1]}" + (f"_{lang}" if k else "")
            driver.save_screenshot(str(SHOTS / f"{name}.png"))
            check_fits(driver, f"stage at {size[0]}x{size[1]} in {lang}")
    finally:
        set_language(driver, "both")


def drawn_step(driver) -> int | None:
    steps = drawn(driver, "drawnSteps", VIEWS)
    return steps[0] if len(set(steps)) == 1 else None


def test_left_arrow_shows_earlier_steps_and_new_live_steps_bring_back_the_newest(stage):
    driver, live = stage
    viewport(driver, *SIZES[0])
    newest = STEPPED[-1]
    for earlier in (STEPPED[-2], STEPPED[-3]):
        press(driver, key("ARROW_LEFT"))
        wait_for(driver, lambda r=earlier: shows(driver, r), f"← to show step {earlier['step']}")
        check_views(driver, earlier)
        check_layout_title(driver, earlier)
        assert live.last_record() is newest, "← ran the engine"
    press(driver, key("ARROW_RIGHT"))  # looking back, → goes one step forward in the history
    wait_for(driver, lambda: shows(driver, STEPPED[-2]), "→ to show the next step of the history")
    assert live.last_record() is newest
    press(driver, key("SPACE"))
    wait_for(driver, lambda: not paused(driver) and not live.llm.paused, "space to resume the engine")
    wait_for(driver, lambda: (r := live.last_record())["step"] > newest["step"] and drawn_step(driver) == r["step"],
             "the views to follow the live steps")
    press(driver, key("SPACE"))
    wait_for(driver, lambda: paused(driver), "space to pause again")
    assert len(debug(driver)["requests"]) == 3, "space pressed Fire (it had the focus) as well"


def test_s_and_p_take_the_keyboard_to_slow_motion_and_the_workload(stage):
    """S: the slow-motion number has the focus; ↑ twice and Escape set 100 ms per step on the
    engine and give the keys back (space pauses again); P: the workload list has the focus."""
    driver, live = stage
    press(driver, "s")
    active = driver.switch_to.active_element
    assert active.get_attribute("type") == "number" and active.find_elements("xpath", "ancestor::*[@id='bs-slow']")
    press(driver, key("ARROW_UP"))
    press(driver, key("ARROW_UP"))
    press(driver, key("ESCAPE"))
    wait_for(driver, lambda: abs(live.llm.min_step_interval - 0.1) < 1e-9, "Escape to send 100 ms of slow motion")
    was = paused(driver)
    press(driver, key("SPACE"))
    wait_for(driver, lambda: paused(driver) != was, "space to reach the stage again after Escape")
    press(driver, "p")
    assert driver.switch_to.active_element.get_attribute("role") == "combobox"
    press(driver, key("ESCAPE"))
    press(driver, key("SPACE"))
    wait_for(driver, lambda: paused(driver) == was, "space to reach the stage after the workload list")


def test_the_page_toggle_switches_between_the_stage_and_the_default_layout(stage):
    driver, live = stage
    stage_on = "return [document.body.classList.contains('bs-stage'), location.search]"
    driver.find_element("id", "bs-stage-toggle").click()
    assert driver.execute_script(stage_on) == [False, ""]
    wait_for(driver, lambda: drawn(driver, "drawnToSize", VIEWS), "the default layout drawn")
    driver.find_element("id", "bs-stage-toggle").click()
    assert driver.execute_script(stage_on) == [True, "?layout=stage"]
    wait_for(driver, lambda: drawn(driver, "drawnToSize", VIEWS), "the stage drawn again")


def test_with_a_presenter_key_unset_the_keys_say_so_and_do_nothing(tiny_model_dir):
    from selenium.webdriver.common.by import By

    with live_dashboard(tiny_model_dir, options=("--num-kv-blocks", "64", "--presenter-key", "s3cret")) as live, \
            chromium(*SIZES[0]) as driver:
        open_stage(driver, live)
        said = lambda: driver.find_element("id", "bs-stage-keys").text  # noqa: E731
        press(driver, key("SPACE"))
        wait_for(driver, lambda: "presenter key" in said(), "the keys to ask for the presenter key")
        box = driver.find_element(By.CSS_SELECTOR, "#bs-key input")
        assert driver.switch_to.active_element == box and not live.llm.paused
        box.send_keys("s3cret")
        driver.find_element("id", "bs-views").click()  # the focus leaves the key box
        press(driver, key("SPACE"))
        wait_for(driver, lambda: paused(driver) and live.llm.paused, "space to pause with the key typed")
