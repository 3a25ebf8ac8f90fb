"""What the views DRAW matches the step they show: read from Plotly's full layout and data and
from the pixel boxes of the rendered SVG, step by step through a replayed trace."""
from __future__ import annotations

import pytest
from chromium import chromium, debug, drawn, needs_chromium, wait_for

pytestmark = needs_chromium
STEPS = 12  # iterations of the shipped trace walked through
PX = 1.5  # pixel tolerance of a drawn edge (anti-aliasing, bar outlines)


@pytest.fixture(scope="module")
def replay_page(replay_server):
    with chromium(1366, 768) as driver:
        driver.get(replay_server.url + "/")
        wait_for(driver, lambda: (s := debug(driver)) and s["lastStep"] >= 0, "the first iteration")
        yield driver


def show_iteration(driver, trace, i: int) -> dict:
    """Step the replay to iteration ``i`` (the page starts on iteration 0)."""
    record = trace.records[i]
    if i:
        driver.find_element("id", "bs-replay-step").click()
    wait_for(driver, lambda: debug(driver)["lastStep"] == record["step"], f"step {record['step']}")
    return record


def segment_bars(figure: dict) -> dict[str, list[dict]]:
    """Horizontal bars by x axis: (name, base, extent, pixel box) of each drawn bar."""
    by_axis: dict[str, list[dict]] = {}
    for trace in figure["traces"]:
        if trace["type"] != "bar" or trace["orientation"] != "h":
            continue
        bases = trace["base"] or [0] * len(trace["x"])
        for k, (extent, base) in enumerate(zip(trace["x"], bases)):
            box = trace["boxes"][k] if k < len(trace["boxes"]) else None
            by_axis.setdefault(trace["xaxis"], []).append(
                {"name": trace["name"], "base": base, "extent": extent, "box": box})
    return by_axis


def rows_drawn(driver, record: dict) -> tuple[dict, list[str]] | None:
    """The token-layout figure and the x axes on which every segment of ``record`` is drawn as
    a bar (name, first row, rows), or None while the figure shows another step."""
    figure = drawn(driver, "drawnFigure", "bs-token-layout")
    if not figure:
        return None
    wanted = {(s["request_id"], s["row_start"], s["num_rows"]) for s in record["segments"]}
    axes = [axis for axis, bars in segment_bars(figure).items()
            if wanted <= {(b["name"], b["base"], b["extent"]) for b in bars}]
    return (figure, axes) if axes else None


def pixel(axis: dict, value: float) -> float:
    lo, hi = axis["range"]
    return axis["offset"] + (value - lo) / (hi - lo) * axis["length"]


def test_token_layout_rows_span_num_rows_on_the_budget_axis(replay_page, trace):
    for i in range(STEPS):
        record = show_iteration(replay_page, trace, i)
        figure, axes = wait_for(replay_page, lambda r=record: rows_drawn(replay_page, r),
                                f"the rows of step {record['step']} drawn")
        budget = record["token_budget"]
        on_budget = [a for a in axes if figure["axes"][a]["range"] == [0, budget]]
        assert on_budget, (f"step {record['step']}: {record['num_rows']} rows of {budget} are drawn "
                           f"on axes {[figure['axes'][a]['range'] for a in axes]}, none [0, {budget}]")
        axis = figure["axes"][on_budget[0]]
        left = figure["svg"]["left"]
        bars = {(b["name"], b["base"], b["extent"]): b for b in segment_bars(figure)[on_budget[0]]}
        for s in record["segments"]:
            box = bars[(s["request_id"], s["row_start"], s["num_rows"])]["box"]
            assert box is not None, f"step {record['step']}: no bar drawn for {s['request_id']}"
            assert abs(box["left"] - (left + pixel(axis, s["row_start"]))) <= PX
            assert abs(box["width"] - (pixel(axis, s["num_rows"]) - pixel(axis, 0))) <= PX
        drawn_rows = sum(bars[(s["request_id"], s["row_start"], s["num_rows"])]["box"]["width"]
                         for s in record["segments"])
        assert abs(drawn_rows / axis["length"] - record["num_rows"] / budget) <= PX * 4 / axis["length"]
