"""The article's preset on a paused engine stepped one step at a time: the step the README
describes packs A 500 cached + 1, B 200 cached + 1 and C 100 new = 102 rows, and the Max
tokens slider holds for all three."""
from __future__ import annotations

import time

import pytest

from viz.live.hub import TelemetryHub
from viz.ui.firing import Firing, Knobs, plan_shot
from viz.ui.presets import load_presets
from viz.ui.submit import LocalSubmitter

MAX_TOKENS = 5


def wait_until(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def stepped(tiny_model_dir):
    from engine import AsyncLLM

    llm = AsyncLLM(tiny_model_dir, num_kv_blocks=256)  # the default budget, 512
    llm.wait_ready(120)
    hub = TelemetryHub()
    hub.attach(llm)
    records = []
    llm.subscribe(records.append)
    firing = Firing(LocalSubmitter(llm), hub)
    library = load_presets()
    llm.pause()
    planned = plan_shot(library, library.presets["article"], Knobs(3, MAX_TOKENS, 0.7, 0),
                        llm.tokenizer)
    firing.fire(planned, owner=None)
    try:
        for still_pending in (2, 1, 0):  # A at once, B once A decodes, C once both do
            wait_until(lambda left=still_pending: firing.pending() <= left)
            stepped_before = len(records)
            llm.step_once()
            wait_until(lambda before=stepped_before: len(records) > before)
        llm.resume()
        wait_until(lambda: _all_finished(records, planned))
    finally:
        llm.shutdown()
    return planned, records


def _all_finished(records, planned) -> bool:
    done = {rid for r in records for rid in r["finished"]}
    return {p.request_id for p in planned} <= done


def test_the_third_step_is_the_articles_102_rows(stepped):
    planned, records = stepped
    a, b, c = (p.request_id for p in planned)
    step = records[2]
    assert [(s["request_id"], s["kind"], s["num_rows"], s["num_cached"])
            for s in step["segments"]] == [(a, "decode", 1, 500), (b, "decode", 1, 200),
                                           (c, "prefill", 100, 0)]
    assert step["num_rows"] == 102
    assert step["cu_seqlens_q"] == [0, 1, 2, 102]
    assert step["seq_lens_k"] == [501, 201, 100]


def test_max_tokens_holds_for_every_request(stepped):
    planned, records = stepped
    generated = {p.request_id: 0 for p in planned}
    for record in records:
        for rid in record["sampled"]:
            if rid in generated:
                generated[rid] += 1
    assert generated == {p.request_id: MAX_TOKENS for p in planned}
