"""A replay counts requests alike in its header and its cards at every position a viewer seeks
or steps to, for each shipped trace (Batchscope's own and vLLM's): the requests that arrived
but no step has scheduled yet are waiting in both."""
from __future__ import annotations

import pytest
from chromium import chromium, needs_chromium
from counts import counts_when_settled, disagreements
from playback import open_replay, show_iteration
from replay_app import SHIPPED, replay_app

from viz.traces.trace import load_trace

pytestmark = needs_chromium
SPREAD = 10  # seeks across the trace, besides the iterations that follow arrivals


def after_arrivals(trace) -> list[int]:
    """The iterations whose record comes right after a request's arrival (it waits there)."""
    iterations, iteration, arrived = [], -1, False
    for entry in trace.entries:
        if entry.kind == "event" and entry.data["kind"] == "arrival":
            arrived = True
        elif entry.kind == "record":
            iteration += 1
            if arrived:
                iterations.append(iteration)
            arrived = False
    return iterations


@pytest.fixture(scope="module", params=SHIPPED, ids=lambda path: path.name.split(".")[0])
def replay(request, tmp_path_factory):
    trace = load_trace(request.param)
    with replay_app(request.param, tmp_path_factory.mktemp("replay")) as server, \
            chromium(1366, 768) as driver:
        open_replay(driver, server)
        yield driver, trace


def test_header_and_cards_count_alike_at_every_position(replay):
    driver, trace = replay
    records = trace.records
    spread = range(0, len(records), max(1, len(records) // SPREAD))
    moments = []
    for i in sorted({*spread, *after_arrivals(trace), len(records) - 1}):
        show_iteration(driver, records, i)
        moments.append(counts_when_settled(driver, f"iteration {i} (step {records[i]['step']})"))
    for i in range(1, 6):  # and stepping, one iteration at a time
        show_iteration(driver, records, i)
        moments.append(counts_when_settled(driver, f"stepped to iteration {i}"))
    assert not disagreements(moments), f"(pending, waiting, running) differ: {disagreements(moments)[:4]}"
