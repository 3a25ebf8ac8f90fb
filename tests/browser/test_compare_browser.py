"""Compare in headless Chromium: the page's Compare controls run the article's arrivals through
mixed and prefill_first (tiny model, a 32-token budget, 50 ms slow motion so that a stall of
several steps outlasts any hiccup of a busy CPU); the table must be the records' numbers, with
the running decoders' ITL p99 lower under mixed, and the stall shown where it happens.
Screenshots at 1920x1080 and 1366x768, with no figure text cut or overlapping."""
from __future__ import annotations

import json
import math
import re
import urllib.request

import pytest
from autopsy_truth import assert_no_overflow, mouse
from chromium import SHOTS, chromium, debug, drawn, needs_chromium, viewport, wait_for
from live import live_dashboard, open_page
from truth import assert_texts_readable

pytestmark = needs_chromium
SIZES = [(1920, 1080), (1366, 768)]
BUDGET, SLOW_MS = 32, 50
FIGURES = [f"bs-compare-{kind}-{side}" for side in "ab" for kind in ("layout", "itl", "ttft")]


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def expected_table(side: dict) -> dict:
    """The table's numbers, from a side's records and arrivals."""
    records, times = side["records"], {}
    for record in records:
        for segment in record["segments"]:
            if segment["sampled"]:
                times.setdefault(segment["request_id"], []).append(record["t_end"])
    ttfts = [times[a["request_id"]][0] - a["time"] for a in side["arrivals"]]
    gaps = [b - a for ts in times.values() for a, b in zip(ts, ts[1:], strict=False)]
    stalls = sum(1 for r in records for rid, info in r["requests"].items()
                 if info["status"] == "decoding" and rid not in {s["request_id"] for s in r["segments"]})
    return {"ttft_p50": nearest_rank(ttfts, 0.5), "ttft_p99": nearest_rank(ttfts, 0.99),
            "itl_p99": nearest_rank(gaps, 0.99), "stalls": stalls, "steps": len(records),
            "preemptions": sum(len(r["preempted"]) for r in records)}


def shown_table(driver) -> dict[str, dict[str, float]]:
    cells = driver.execute_script(
        "return [...document.querySelectorAll('#bs-compare .bs-compare-table td[data-side]')]"
        ".map(c => [c.parentElement.dataset.row, c.dataset.side, Number(c.dataset.value), c.className]);")
    table: dict[str, dict] = {}
    for row, side, value, cls in cells:
        table.setdefault(side, {})[row] = value
        table[side].setdefault("better", []).extend([row] if "bs-better" in cls else [])
    return table


def set_value(driver, selector: str, value: int) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, selector)
    box.clear()
    box.send_keys(str(value), Keys.TAB)


def compare_state(live) -> dict:
    return json.loads(urllib.request.urlopen(live.url + "/compare/state", timeout=10).read())


@pytest.fixture(scope="module")
def compared(tiny_model_dir):
    from selenium.webdriver.common.by import By

    with live_dashboard(tiny_model_dir) as live, chromium(*SIZES[0]) as driver:
        open_page(driver, live)
        driver.find_element(By.CSS_SELECTOR, "#bs-compare-controls .label-wrap").click()
        # an accordion's children are rendered when it first opens: wait for the button to exist
        wait_for(driver, lambda: any(b.is_displayed() for b in driver.find_elements(By.ID, "bs-compare-run")),
                 "the Compare controls")
        for side in "ab":
            set_value(driver, f"#bs-compare-budget-{side} input", BUDGET)
        set_value(driver, "#bs-compare-slow input[type=number]", SLOW_MS)
        driver.find_element(By.ID, "bs-compare-run").click()
        wait_for(driver, lambda: (debug(driver)["compare"] or {}).get("open")
                 or compare_state(live)["state"] == "failed", "the compare to run and open", 600)
        assert compare_state(live)["error"] is None, compare_state(live)
        result = json.loads(urllib.request.urlopen(live.url + "/compare/result", timeout=10).read())
        yield driver, result


def test_the_table_is_the_records_and_mixed_keeps_decoders_faster(compared):
    driver, result = compared
    sides = {side["label"]: side for side in result["sides"]}
    assert [sides[k]["config"] for k in "AB"] == [{"policy": "mixed", "max_num_batched_tokens": BUDGET},
                                                 {"policy": "prefill_first", "max_num_batched_tokens": BUDGET}]
    assert result["min_step_ms"] == SLOW_MS and result["pattern"]["name"] == "article"
    shown = shown_table(driver)
    for label, side in sides.items():
        want = expected_table(side)
        for row, value in want.items():
            assert abs(shown[label][row] - value) < 1e-9, (label, row, shown[label][row], value)
    assert shown["A"]["itl_p99"] < shown["B"]["itl_p99"], shown
    assert "itl_p99" in shown["A"]["better"]
    assert shown["A"]["stalls"] == 0 < shown["B"]["stalls"]


def test_the_panel_says_what_ran(compared):
    driver, _ = compared
    text = driver.execute_script("return document.querySelector('#bs-compare .bs-compare-ran').textContent;")
    assert "one after the other" in text and f"at least {SLOW_MS} ms" in text
    assert all(f"({n}-token prompt" in text for n in (499, 200, 100)) and "once the earlier ones decode" in text
    head = driver.execute_script("return document.querySelector('#bs-compare .bs-panel-sub').textContent;")
    assert f"A: mixed, budget {BUDGET}" in head and f"B: prefill first, budget {BUDGET}" in head


def layout_title(driver, side: str) -> str:
    figure = drawn(driver, "drawnFigure", f"bs-compare-layout-{side}")
    return " ".join(a["text"] for a in figure["annotations"])


def test_the_stall_is_shown_where_it_happens_and_both_sides_move_in_sync(compared):
    driver, result = compared
    assert "stalled" in layout_title(driver, "b") and "stalled" not in layout_title(driver, "a")
    state = debug(driver)["compare"]
    scrubber = driver.execute_script("const r = document.querySelector('#bs-compare .bs-compare-scrubber')"
                                     ".getBoundingClientRect(); return [r.left, r.right, (r.top + r.bottom) / 2];")
    left, right, y = scrubber
    mouse(driver, "mousePressed", right - 2, y)  # drag the scrubber to the end
    mouse(driver, "mouseReleased", right - 2, y)
    wait_for(driver, lambda: debug(driver)["compare"]["at"] > state["at"], "the cursor to move")
    at = debug(driver)["compare"]["at"]
    for side, run in zip("ab", result["sides"], strict=True):
        t0 = min(a["time"] for a in run["arrivals"])
        shown = [r["step"] for r in run["records"] if r["t_end"] - t0 <= at + 1e-9]
        wanted = re.compile(rf"\bstep {shown[-1]}\b")
        wait_for(driver, lambda s=side, w=wanted: w.search(layout_title(driver, s)), f"{side} at step {shown[-1]}")


def test_compare_screenshots_are_readable_at_both_sizes(compared):
    driver, _ = compared
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for width, height in SIZES:
            viewport(driver, width, height)
            wait_for(driver, lambda: driver.execute_script(
                "return [...document.querySelectorAll('#bs-compare .bs-compare-plot')].every(p =>"
                " p._fullLayout && Math.abs(p._fullLayout.width - p.clientWidth) <= 1);"), "the compare drawn to size")
            assert_texts_readable(driver, f"compare at {width}x{height}", FIGURES)
            assert_no_overflow(driver, "#bs-compare")
            driver.save_screenshot(str(SHOTS / f"compare_{width}x{height}.png"))
            driver.execute_script("document.querySelector('#bs-compare .bs-panel-box').scrollTop = 1e6;")
            driver.save_screenshot(str(SHOTS / f"compare_{width}x{height}_table.png"))
            driver.execute_script("document.querySelector('#bs-compare .bs-panel-box').scrollTop = 0;")
    finally:
        viewport(driver, *SIZES[0])
