"""Charts scaled to what they show, in the real page at 1280x720: the token layout's recent
iterations and Timing's rows span the replayed window's own rows (with headroom), not the token
budget, and a padded-batch spike is clipped, not allowed to flatten the rest. Screenshots at
1920x1080 and 1280x720 in out/screenshots/ (chart-scales_*)."""
from __future__ import annotations

from chromium import SHOTS, chromium, drawn, needs_chromium, viewport, wait_for
from playback import open_replay, show_iteration

pytestmark = needs_chromium


def after_spike(records: list[dict]) -> int:
    """The iteration 30 after the shipped trace's last padded-batch spike (64 rows, 186 padded)."""
    return max(i for i, r in enumerate(records) if r["padded_rows"] > 2 * r["num_rows"]) + 30


def top_of(driver, view: str, axis: str) -> float | None:
    figure = drawn(driver, "drawnFigure", view)
    return figure["axes"][axis]["range"][1] if figure else None


def test_history_and_timing_rows_span_the_data_not_the_budget(replay_server, records):
    with chromium(1280, 720) as driver:
        open_replay(driver, replay_server)
        driver.execute_script("window.batchscope.setLanguage('en')")
        shown = after_spike(records)
        show_iteration(driver, records, shown)
        window = records[shown - 39:shown + 1]
        most = max(r["num_rows"] for r in window)
        # after a seek the window's earlier records may arrive after the step itself: wait for them
        history = wait_for(driver, lambda: (top := top_of(driver, "bs-token-layout", "y2")) and top >= most and top,
                           f"the history drawn with its {most}-row step")
        assert most <= history <= max(most * 1.15 + 1, records[shown]["token_budget"] * 1.08 + 1), history
        rows = top_of(driver, "bs-timing", "y2")
        assert rows < max(r["padded_rows"] for r in window) / 2, rows  # the spike is clipped
        SHOTS.mkdir(parents=True, exist_ok=True)
        for width, height in [(1920, 1080), (1280, 720)]:
            viewport(driver, width, height)
            driver.execute_script("window.scrollTo(0, 0)")
            wait_for(driver, lambda w=width: drawn(driver, "drawnToSize", ["bs-token-layout", "bs-timing"]), "resized")
            driver.save_screenshot(str(SHOTS / f"chart-scales_{width}x{height}.png"))
