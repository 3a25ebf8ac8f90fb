"""A step in which vLLM scheduled no tokens (it runs one right after requests finish, so that
their ids reach the workers, and under async scheduling) never replaces, on screen, the last
step that ran work: the token layout, the block tables and the attention draw that step's rows,
blocks and segments, and its title says an empty step followed; the history marks the empty
step. Read from what the shipped vLLM trace's replay draws at each of its empty steps
(iterations 29 and 63: the last one is where a run ends, when people look). Screenshots at
1280x720 and 1920x1080 in out/screenshots/ (empty-step_*)."""
from __future__ import annotations

import pytest
from chromium import chromium, drawn, needs_chromium, viewport, wait_for
from playback import open_replay, show_iteration
from replay_app import VLLM_TRACE
from truth import (
    bare,
    check_attention,
    check_block_tables,
    check_token_rows,
    layout_title,
    layout_title_of,
    rows_drawn,
    says,
    screenshots_readable,
)

from viz.traces.trace import load_trace

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def vllm_records() -> list[dict]:
    return load_trace(VLLM_TRACE).records


@pytest.fixture(scope="module")
def vllm_page(vllm_replay_server):
    with chromium(1366, 768) as driver:
        open_replay(driver, vllm_replay_server)
        driver.execute_script("window.batchscope.setLanguage('en')")
        yield driver


def empty_iterations(records: list[dict]) -> list[int]:
    return [i for i, record in enumerate(records) if record["num_rows"] == 0]


def worked_before(records: list[dict], i: int) -> dict:
    """The last record up to iteration ``i`` whose step scheduled tokens."""
    return next(r for r in reversed(records[:i + 1]) if r["num_rows"] > 0)


def test_the_shipped_vllm_trace_has_empty_steps_after_work(vllm_records):
    empties = empty_iterations(vllm_records)
    assert empties and empties[-1] == len(vllm_records) - 1, "the run ends with an empty step"
    assert all(vllm_records[i - 1]["num_rows"] > 0 for i in empties)


def test_after_an_empty_step_the_views_draw_the_last_step_that_ran_work(vllm_page, vllm_records):
    for i in empty_iterations(vllm_records):
        show_iteration(vllm_page, vllm_records, i)
        worked = worked_before(vllm_records, i)
        shown = wait_for(vllm_page, lambda w=worked: rows_drawn(vllm_page, w),
                         f"iteration {i}: step {worked['step']}'s rows in the token layout", timeout=10)
        check_token_rows(*shown, worked)
        check_block_tables(drawn(vllm_page, "drawnFigure", "bs-block-tables"), worked)
        check_attention(drawn(vllm_page, "drawnFigure", "bs-attention"), worked)


def test_the_title_names_the_step_with_work_and_says_an_empty_step_followed(vllm_page, vllm_records):
    for i in empty_iterations(vllm_records):
        empty = show_iteration(vllm_page, vllm_records, i)
        worked = worked_before(vllm_records, i)
        freed = empty["kv"]["num_free"] - worked["kv"]["num_free"]
        title = wait_for(vllm_page, lambda: layout_title(vllm_page), "the token layout's title")
        assert bare(title).startswith(bare(layout_title_of(worked, "en"))), title
        assert bare(says("layout.then_empty_one", "en")) in bare(title), title
        assert bare(says("layout.freed", "en", n=freed)) in bare(title), title


def test_the_history_marks_the_empty_step_drawn_readably_at_both_sizes(vllm_page, vllm_records):
    last = show_iteration(vllm_page, vllm_records, len(vllm_records) - 1)
    figure = drawn(vllm_page, "drawnFigure", "bs-token-layout")
    [marks] = [t for t in figure["traces"] if (t["meta"] or {}).get("role") == "empty"]
    assert last["step"] in marks["x"] and marks["x"] == [r["step"] for r in vllm_records[-40:] if not r["num_rows"]]
    assert says("layout.empty_step", "en") in figure["axes"]["x2"]["title"]
    try:
        screenshots_readable(vllm_page, "empty-step", [(1280, 720), (1920, 1080)])
    finally:
        viewport(vllm_page, 1366, 768)
