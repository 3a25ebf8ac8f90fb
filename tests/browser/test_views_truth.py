"""What the views DRAW matches the step they show: read from Plotly's full layout and data and
from the pixel boxes of the rendered SVG, step by step through a replayed trace."""
from __future__ import annotations

import pytest
from chromium import chromium, debug, drawn, needs_chromium, viewport, wait_for

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
    """Bring this page's replay to iteration ``i``: a step when it is the next one, else a seek."""
    record = trace.records[i]
    shown = debug(driver)["lastStep"]
    if i and shown == trace.records[i - 1]["step"]:
        driver.find_element("id", "bs-replay-step").click()
    elif shown != record["step"]:
        scrub(driver, i)
    wait_for(driver, lambda: debug(driver)["lastStep"] == record["step"], f"step {record['step']}")
    return record


def scrub(driver, iteration: int) -> None:
    driver.execute_script(
        "const s = document.getElementById('bs-replay-scrubber'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('input', {bubbles: true}));"
        "s.dispatchEvent(new Event('change', {bubbles: true}));", iteration)


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


def shown_figures(driver, trace, i: int) -> dict:
    """Iteration ``i`` and the four figures once the token layout draws its step."""
    record = show_iteration(driver, trace, i)
    wait_for(driver, lambda: rows_drawn(driver, record), f"the rows of step {record['step']} drawn")
    return record


def test_attention_segments_are_cu_seqlens_q_by_seq_lens_k(replay_page, trace):
    for i in range(STEPS):
        record = shown_figures(replay_page, trace, i)
        figure = drawn(replay_page, "drawnFigure", "bs-attention")
        yaxis = figure["axes"]["y"]
        segments = [t for t in figure["traces"] if (t["meta"] or {}).get("role") == "segment"]
        assert [t["meta"]["rid"] for t in segments] == [s["request_id"] for s in record["segments"]]
        cu, keys = record["cu_seqlens_q"], record["seq_lens_k"]
        for k, (trace_k, segment) in enumerate(zip(segments, record["segments"])):
            assert (min(trace_k["y"]), max(trace_k["y"])) == (cu[k], cu[k + 1])
            assert max(trace_k["x"]) - min(trace_k["x"]) == segment["num_rows"]  # this step's keys
            cached = next((t["meta"]["cached"] for t in figure["traces"] if (t["meta"] or {}).get("role")
                           == "cached" and t["meta"]["rid"] == segment["request_id"]), 0)
            assert cached + segment["num_rows"] == trace_k["meta"]["keys"] == keys[k]
            top = min(b["top"] for b in trace_k["boxes"])
            bottom = max(b["bottom"] for b in trace_k["boxes"])
            svg_top = figure["svg"]["top"]
            assert abs(top - (svg_top + y_pixel(yaxis, cu[k]))) <= PX + 1
            assert abs(bottom - (svg_top + y_pixel(yaxis, cu[k + 1]))) <= PX + 1
        labels = [t["text"] for t in figure["ticks"] if "xtick" in t["axis"]]
        expected = {f"{s['request_id']} {s['num_keys']}" for s in record["segments"]}
        assert labels and set(labels) <= expected, (labels, expected)


def y_pixel(axis: dict, value: float) -> float:
    lo, hi = axis["range"]
    return axis["offset"] + axis["length"] * (1 - (value - lo) / (hi - lo))


def test_block_table_cells_are_the_records_block_ids(replay_page, trace):
    for i in range(STEPS):
        record = shown_figures(replay_page, trace, i)
        figure = drawn(replay_page, "drawnFigure", "bs-block-tables")
        [tables] = [t for t in figure["traces"] if (t["meta"] or {}).get("role") == "tables"]
        rids = list(record["block_tables"])[:16]
        assert tables["y"] == rids
        for row, rid in zip(tables["text"], rids):
            assert [c for c in row if c != ""] == [str(b) for b in record["block_tables"][rid]]
        ticks = [t["text"] for t in figure["ticks"] if "ytick" in t["axis"]]
        assert set(rids) <= set(ticks)


def overlaps(a: dict, b: dict, slack: float = 1.0) -> bool:
    return (a["left"] + slack < b["right"] and b["left"] + slack < a["right"]
            and a["top"] + slack < b["bottom"] and b["top"] + slack < a["bottom"])


def assert_texts_readable(driver, where: str) -> None:
    """No label of any view runs out of its figure or over another label."""
    for view in VIEWS:
        drawn_texts = drawn(driver, "drawnTexts", view)
        svg = drawn_texts["svg"]
        for text in drawn_texts["texts"]:
            box = text["box"]
            assert (box["left"] >= svg["left"] - 1 and box["right"] <= svg["right"] + 1
                    and box["top"] >= svg["top"] - 1 and box["bottom"] <= svg["bottom"] + 1), \
                f"{where}: {view}: {text['kind']} {text['text']!r} runs out of the figure"
        texts = drawn_texts["texts"]
        for k, a in enumerate(texts):
            for b in texts[k + 1:]:
                assert not overlaps(a["box"], b["box"]), \
                    f"{where}: {view}: {a['kind']} {a['text']!r} overlaps {b['kind']} {b['text']!r}"


VIEWS = ["bs-token-layout", "bs-block-tables", "bs-attention", "bs-timing"]
SIZES = [(1920, 1080), (1600, 900), (1366, 768)]
SAMPLED = [0, 3, 8, 30, 60, 100, 150, 200, 250, 280]  # across the trace: prefill, chunks, decodes


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_no_label_is_cut_or_overlaps_another(replay_page, trace, size):
    viewport(replay_page, *size)
    try:
        for i in SAMPLED:
            shown_figures(replay_page, trace, i)
            wait_for(replay_page, lambda: drawn(replay_page, "drawnToSize", VIEWS), "views sized to fit")
            assert_texts_readable(replay_page, f"{size[0]}x{size[1]}, iteration {i}")
    finally:
        viewport(replay_page, 1366, 768)


def test_the_token_layout_title_says_the_whole_sum(replay_page, trace):
    replay_page.execute_script("window.batchscope.setLanguage('en')")
    try:
        for i in range(STEPS):
            record = shown_figures(replay_page, trace, i)
            title = wait_for(replay_page, lambda r=record: (t := layout_title(replay_page))
                             and t.startswith(f"step {r['step']}:") and t, "the English title")
            rows = "1 row" if record["num_rows"] == 1 else f"{record['num_rows']} rows"
            terms = " + ".join(f"{s['request_id']} {s['num_rows']}" for s in record["segments"])
            assert title.startswith(f"step {record['step']}: {terms} = {rows} of {record['token_budget']}")
    finally:
        replay_page.execute_script("window.batchscope.setLanguage('both')")


def layout_title(driver) -> str | None:
    texts = drawn(driver, "drawnTexts", "bs-token-layout")
    titles = [t for t in texts["texts"] if t["kind"] == "annotation"] if texts else []
    return titles[0]["text"] if titles else None
