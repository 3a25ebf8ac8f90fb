"""Attach mode with vLLM's ``--data-parallel-size 2``: each rank's scheduler streams its own steps
over its own ingest connection, and one dashboard shows both. The page says which rank ran the
step it shows (the token layout's title, the KV pool's title), marks each rank's steps in the
recent-iterations history, and the header names the ranks attached and counts each rank's
waiting and running requests as its latest record does, besides the total. Screenshots at
1280x720 and 1920x1080 in out/screenshots/ (data-parallel_*, and after an empty step)."""
from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from chromium import chromium, debug, drawn, needs_chromium, viewport, wait_for
from truth import VIEWS, bare, check_token_rows, layout_title, rows_drawn, says, screenshots_readable

from support.server import BackgroundServer

VLLM_TESTS = Path(__file__).resolve().parents[1] / "vllm"
sys.path[:0] = [str(VLLM_TESTS), str(VLLM_TESTS.parents[1] / "integrations" / "vllm")]
from rank_scenarios import RankSteps, rank_hello  # noqa: E402

pytestmark = needs_chromium
TOKEN = "data-parallel"
SIZES = [(1280, 720), (1920, 1080)]
HEADER = """
  const pick = (part) => [...document.querySelectorAll('#bs-status .bs-status-' + part)];
  return {ranks: pick('rank').map((e) => ({rank: +e.dataset.rank, waiting: +e.dataset.waiting,
                                            running: +e.dataset.running, text: e.textContent})),
          counts: pick('counts').map((e) => ({waiting: +e.dataset.waiting, running: +e.dataset.running})),
          parallel: pick('data-parallel').map((e) => e.textContent)};"""


@contextmanager
def attached_dashboard():
    """``app.py --vllm`` in this process (no vLLM behind it: nothing is fired) and its ingest."""
    import app as entry

    args = entry.build_attach_parser().parse_args(["--vllm", "http://127.0.0.1:9", "--ingest-token", TOKEN])
    app, source, _ = entry.create_attach_app(args)
    with BackgroundServer(app) as server:
        yield server, source


@pytest.fixture(scope="module")
def two_ranks():
    """The page of a dashboard that two ranks attached to, each having sent two steps."""
    with attached_dashboard() as (server, source), chromium(*SIZES[0]) as driver:
        producers = [source.open(rank_hello(rank, TOKEN)) for rank in (0, 1)]
        ranks = [RankSteps(0, ["a0"], waiting=["w0"]), RankSteps(1, ["b1", "c1"])]
        seen: list[dict] = []
        source.subscribe(seen.append)
        driver.get(server.url + "/")
        wait_for(driver, lambda: (s := debug(driver)) and s["connected"], "the page to connect")
        driver.execute_script("window.batchscope.setLanguage('en')")

        def send(rank: int, record: dict) -> dict:
            producers[rank].receive(json.dumps({"type": "record", "data": record}))
            return seen[-1]

        yield driver, ranks, send


def latest_of(records: list[dict], rank: int) -> dict:
    return next(r for r in reversed(records) if r["source"]["data_parallel_rank"] == rank)


def shown_step(driver, step: int):
    wait_for(driver, lambda: (s := debug(driver)) and s["lastStep"] == step
             and drawn(driver, "drawnSteps", VIEWS) == [step] * len(VIEWS), f"step {step} drawn")


def test_the_page_names_the_rank_of_the_step_it_shows_and_counts_each_rank(two_ranks):
    driver, ranks, send = two_ranks
    merged = [send(rank, ranks[rank].step()) for rank in (0, 1, 0, 1)]
    last = merged[-1]
    shown_step(driver, last["step"])
    assert [r["source"]["data_parallel_rank"] for r in merged] == [0, 1, 0, 1]
    figure, axes = rows_drawn(driver, last)
    check_token_rows(figure, axes, last)
    title = wait_for(driver, lambda: layout_title(driver), "the token layout's title")
    assert bare(title).startswith(bare(says("layout.step_rank", "en", step=last["step"], rank=1) + ":")), title
    pool = [bare(a["text"]) for a in drawn(driver, "drawnFigure", "bs-block-tables")["annotations"]]
    assert bare(says("rank.name", "en", rank=1) + says("blocks.pool", "en", n=last["kv"]["num_blocks"])) in pool, pool
    header = driver.execute_script(HEADER)
    assert header["parallel"] == [says("status.data_parallel", "en", size=2, ranks="0, 1")]
    expected = [{"rank": rank, "waiting": latest_of(merged, rank)["num_waiting"],
                 "running": latest_of(merged, rank)["num_running"]} for rank in (0, 1)]
    assert [{k: r[k] for k in ("rank", "waiting", "running")} for r in header["ranks"]] == expected
    assert header["counts"] == [{"waiting": sum(e["waiting"] for e in expected),
                                 "running": sum(e["running"] for e in expected)}]
    assert header["ranks"][1]["text"] == "rank 1: 0 waiting, 2 running"


def test_the_history_marks_which_rank_ran_each_step(two_ranks):
    driver, ranks, send = two_ranks
    figure = drawn(driver, "drawnFigure", "bs-token-layout")
    marks = {t["meta"]["rank"]: t["x"] for t in figure["traces"] if (t["meta"] or {}).get("role") == "rank"}
    assert marks == {0: [0, 2], 1: [1, 3]}
    key = figure["axes"]["x2"]["title"]
    assert says("rank.name", "en", rank=0) in key and says("rank.name", "en", rank=1) in key, key
    screenshots(driver, "data-parallel")


def test_an_empty_step_of_a_rank_leaves_the_step_with_work_on_screen(two_ranks):
    driver, ranks, send = two_ranks
    worked = send(0, ranks[0].step())
    empty = send(0, ranks[0].empty())
    send(1, ranks[1].empty())  # the other rank's: it frees blocks of its own pool, not of rank 0's
    shown_step(driver, empty["step"] + 1)
    figure, axes = rows_drawn(driver, worked)
    check_token_rows(figure, axes, worked)
    title = layout_title(driver)
    assert bare(title).startswith(bare(says("layout.step_rank", "en", step=worked["step"], rank=0) + ":")), title
    assert bare(says("layout.then_empty", "en", n=2)) in bare(title), title
    freed = empty["kv"]["num_free"] - worked["kv"]["num_free"]
    assert bare(says("layout.freed_one" if freed == 1 else "layout.freed", "en", n=freed)) in bare(title), title
    screenshots(driver, "data-parallel-empty-step")


def screenshots(driver, name: str) -> None:
    try:
        screenshots_readable(driver, name, SIZES)
    finally:
        viewport(driver, *SIZES[0])
