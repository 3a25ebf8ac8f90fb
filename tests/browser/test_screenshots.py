"""Every preset on a paused engine, stepped to a step that mixes prefill and decode rows of all
its requests (or for 8 steps), drawn at 1920x1080 and 1366x768 with no label cut or
overlapping; screenshots in out/screenshots/ (BATCHSCOPE_SCREENSHOT_MODEL=default takes them
with the real default model)."""
from __future__ import annotations

import os

import pytest
from chromium import chromium, debug, needs_chromium, viewport, wait_for
from live import PRESETS, choose_preset, fire, live_dashboard, open_page, presenter, step
from truth import screenshots_readable

pytestmark = needs_chromium
SIZES = [(1920, 1080), (1366, 768)]
MAX_STEPS = 8


@pytest.fixture(scope="module")
def page(tiny_model_dir):
    model = os.environ.get("BATCHSCOPE_SCREENSHOT_MODEL", tiny_model_dir)
    with live_dashboard(model) as live, chromium(*SIZES[0]) as driver:
        open_page(driver, live)
        presenter(driver, "pause")
        yield driver, live


def showcase(record: dict, ids: list[str]) -> bool:
    """A step that mixes prefill and decode rows of every request fired (the article's 102-row
    step), the one to show."""
    kinds = {s["kind"] == "decode" for s in record["segments"]}
    return kinds == {True, False} and len(record["segments"]) == len(ids)


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p["id"])
def test_each_preset_drawn_readably_at_both_sizes(page, preset):
    driver, live = page
    choose_preset(driver, preset["label"])
    ids = fire(driver)
    records = [step(driver, live)]
    while len(records) < MAX_STEPS and not showcase(records[-1], ids):
        records.append(step(driver, live))
    try:
        screenshots_readable(driver, preset["id"], SIZES)
    finally:
        viewport(driver, *SIZES[0])
        presenter(driver, "resume")
        wait_for(driver, lambda: {s for rid, s in debug(driver)["cards"] if rid in ids} <= {"finished"},
                 "the shot to finish", 300)
        presenter(driver, "pause")
