"""Checks that what a view DRAWS equals the record it shows, read from Plotly's full layout and
data and from the pixel boxes of the rendered SVG (drawn.js). Shared by the replay and the
live-engine browser tests."""
from __future__ import annotations

import json
import re

from chromium import ROOT, SHOTS, debug, drawn, viewport, wait_for

PX = 1.5  # pixel tolerance of a drawn edge (anti-aliasing, bar outlines)
VIEWS = ["bs-token-layout", "bs-block-tables", "bs-attention", "bs-timing"]
STRINGS = json.loads((ROOT / "assets" / "strings.json").read_text(encoding="utf-8"))["views"]
MAX_SUM_TERMS = 6  # a title names at most this many requests' rows, else counts the requests


def segment_bars(figure: dict) -> dict[str, list[dict]]:
    """Horizontal bars by x axis: (name, base, extent, pixel box) of each drawn bar."""
    by_axis: dict[str, list[dict]] = {}
    for trace in figure["traces"]:
        if trace["type"] != "bar" or trace["orientation"] != "h":
            continue
        bases = trace["base"] or [0] * len(trace["x"])
        for k, (extent, base) in enumerate(zip(trace["x"], bases, strict=True)):
            box = trace["boxes"][k] if k < len(trace["boxes"]) else None
            by_axis.setdefault(trace["xaxis"], []).append(
                {"name": trace["name"], "base": base, "extent": extent, "box": box})
    return by_axis


def shows(driver, record: dict) -> bool:
    """Whether every view is drawn for ``record``'s step."""
    return drawn(driver, "drawnSteps", VIEWS) == [record["step"]] * len(VIEWS)


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


def x_pixel(axis: dict, value: float) -> float:
    lo, hi = axis["range"]
    return axis["offset"] + (value - lo) / (hi - lo) * axis["length"]


def y_pixel(axis: dict, value: float) -> float:
    lo, hi = axis["range"]
    return axis["offset"] + axis["length"] * (1 - (value - lo) / (hi - lo))


def check_token_rows(figure: dict, axes: list[str], record: dict) -> None:
    """The step's rows span exactly num_rows on an axis whose full range is the token budget."""
    budget = record["token_budget"]
    on_budget = [a for a in axes if figure["axes"][a]["range"] == [0, budget]]
    assert on_budget, (f"step {record['step']}: {record['num_rows']} rows of {budget} are drawn "
                       f"on axes {[figure['axes'][a]['range'] for a in axes]}, none [0, {budget}]")
    axis = figure["axes"][on_budget[0]]
    left = figure["svg"]["left"]
    bars = {(b["name"], b["base"], b["extent"]): b for b in segment_bars(figure)[on_budget[0]]}
    widths = 0.0
    for s in record["segments"]:
        box = bars[(s["request_id"], s["row_start"], s["num_rows"])]["box"]
        assert box is not None, f"step {record['step']}: no bar drawn for {s['request_id']}"
        assert abs(box["left"] - (left + x_pixel(axis, s["row_start"]))) <= PX
        assert abs(box["width"] - (x_pixel(axis, s["num_rows"]) - x_pixel(axis, 0))) <= PX
        widths += box["width"]
    assert abs(widths / axis["length"] - record["num_rows"] / budget) <= PX * 4 / axis["length"]


def check_attention(figure: dict, record: dict) -> None:
    """Each segment's rows are cu_seqlens_q's, its keys seq_lens_k's (drawn and labelled)."""
    yaxis = figure["axes"]["y"]
    segments = [t for t in figure["traces"] if (t["meta"] or {}).get("role") == "segment"]
    assert [t["meta"]["rid"] for t in segments] == [s["request_id"] for s in record["segments"]]
    cu, keys = record["cu_seqlens_q"], record["seq_lens_k"]
    for k, (trace, segment) in enumerate(zip(segments, record["segments"], strict=True)):
        assert (min(trace["y"]), max(trace["y"])) == (cu[k], cu[k + 1])
        assert max(trace["x"]) - min(trace["x"]) == segment["num_rows"]  # this step's keys
        cached = next((t["meta"]["cached"] for t in figure["traces"] if (t["meta"] or {}).get("role")
                       == "cached" and t["meta"]["rid"] == segment["request_id"]), 0)
        assert cached + segment["num_rows"] == trace["meta"]["keys"] == keys[k]
        top = min(b["top"] for b in trace["boxes"])
        bottom = max(b["bottom"] for b in trace["boxes"])
        svg_top = figure["svg"]["top"]
        assert abs(top - (svg_top + y_pixel(yaxis, cu[k]))) <= PX + 1
        assert abs(bottom - (svg_top + y_pixel(yaxis, cu[k + 1]))) <= PX + 1
    labels = [t["text"] for t in figure["ticks"] if "xtick" in t["axis"]]
    expected = {f"{s['request_id']} {s['num_keys']}" for s in record["segments"]}
    assert labels and set(labels) <= expected, (labels, expected)


def check_block_tables(figure: dict, record: dict) -> None:
    """Every block-table cell is the record's block id, every row a request it schedules."""
    [tables] = [t for t in figure["traces"] if (t["meta"] or {}).get("role") == "tables"]
    rids = list(record["block_tables"])[:16]
    assert tables["y"] == rids
    for row, rid in zip(tables["text"], rids, strict=True):
        assert [c for c in row if c != ""] == [str(b) for b in record["block_tables"][rid][:64]]
    ticks = [t["text"] for t in figure["ticks"] if "ytick" in t["axis"]]
    assert set(rids) <= set(ticks)


def check_views(driver, record: dict) -> None:
    """All three checks on the page's current figures (which show ``record``)."""
    figure, axes = rows_drawn(driver, record)
    check_token_rows(figure, axes, record)
    check_attention(drawn(driver, "drawnFigure", "bs-attention"), record)
    check_block_tables(drawn(driver, "drawnFigure", "bs-block-tables"), record)


def overlaps(a: dict, b: dict, slack: float = 1.0) -> bool:
    return (a["left"] + slack < b["right"] and b["left"] + slack < a["right"]
            and a["top"] + slack < b["bottom"] and b["top"] + slack < a["bottom"])


def assert_texts_readable(driver, where: str, views: list[str] = VIEWS) -> None:
    """No label of any of ``views`` (figure element ids) runs out of its figure or over
    another label."""
    for view in views:
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


def assert_page_text_whole(driver, where: str) -> None:
    """No text of the page outside the figures (dropdowns, buttons, header, cards, captions)
    is cut by its box or hidden under an icon."""
    clipped = drawn(driver, "clippedPageTexts")
    assert not clipped, f"{where}: text cut off: " + "; ".join(
        f"{c['tag'].lower()}#{c['id']}.{c['cls'].split(' ')[0]} {c['text']!r} needs {c['needs']} px, has {c['shown']}"
        for c in clipped)


def screenshots_readable(driver, name: str, sizes: list[tuple[int, int]]) -> None:
    """At each of ``sizes`` (the viewport stays at the last): the views redrawn to fit, a
    screenshot ``SHOTS/<name>_<W>x<H>.png``, no label cut or overlapping, no page text cut."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in sizes:
        viewport(driver, width, height)
        driver.execute_script("window.scrollTo(0, 0)")
        wait_for(driver, lambda: drawn(driver, "drawnToSize", VIEWS), "views sized to fit")
        driver.save_screenshot(str(SHOTS / f"{name}_{width}x{height}.png"))
        assert_texts_readable(driver, f"{name} at {width}x{height}")
        assert_page_text_whole(driver, f"{name} at {width}x{height}")


def layout_title(driver) -> str | None:
    """The token-layout title as drawn (its lines run together)."""
    texts = drawn(driver, "drawnTexts", "bs-token-layout")
    titles = [t for t in texts["texts"] if t["kind"] == "annotation"] if texts else []
    return titles[0]["text"] if titles else None


def says(key: str, lang: str, **values) -> str:
    """The strings table's ``key`` as the page shows it in ``lang`` ("both": "English · 中文")."""
    texts = [STRINGS[key][shown].format(**values) for shown in (("en", "zh") if lang == "both" else (lang,))]
    return " · ".join(dict.fromkeys(texts))


def layout_title_of(record: dict, lang: str) -> str:
    """The sum the token-layout title must show for ``record``: "step 12: A 1 + B 1 + C 100 =
    102 rows of 512" (in ``lang``), before any policy or stalled note."""
    segments = record["segments"]
    terms = (" + ".join(f"{s['request_id']} {s['num_rows']}" for s in segments)
             if 0 < len(segments) <= MAX_SUM_TERMS else says("layout.requests", lang, n=len(segments)))
    rows = says("layout.rows_one" if record["num_rows"] == 1 else "layout.rows", lang,
                rows=record["num_rows"], budget=record["token_budget"])
    return f"{says('layout.step', lang, step=record['step'])}: {terms} = {rows}"


def bare(text: str) -> str:
    """``text`` without spaces and separators (where a drawn title's lines break)."""
    return re.sub(r"[\s·]+", "", text)


def check_layout_title(driver, record: dict) -> None:
    """The token-layout title shows the step's whole sum, uncut, in the page's language (its
    lines may break where a separator was)."""
    expected = layout_title_of(record, debug(driver)["lang"])
    title = layout_title(driver)
    assert title and "…" not in title and bare(title).startswith(bare(expected)), \
        f"step {record['step']}: the title reads {title!r}, not {expected!r}"
