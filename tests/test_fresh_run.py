"""A presenter's "Fresh run" (issue 25, part 5): the engine forgets every cached prefix block no
request holds, between steps on its thread, so a demo fired again computes its prompts in full
(no prefix hit), as the first time; blocks running requests hold are left alone, and the next
record shows the forgotten blocks free, not cached."""
from __future__ import annotations

import time
import warnings
from types import SimpleNamespace

import pytest
from test_block_manager import _request

from engine import AsyncLLM, EngineConfig, LLMEngine, SamplingParams
from engine.block_manager import BlockManager
from viz.ui.handlers import DashboardHandlers
from viz.ui.presenter import PresenterAccess
from viz.ui.strings import PAGE

PROMPT = list(range(3, 43))  # 40 tokens: 10 full blocks of 4, 2 of 16


def wait_until(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_block_manager_forgets_idle_cached_blocks_only():
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    done, running = _request("a", range(10)), _request("b", range(100, 109))
    for request in (done, running):
        assert bm.admit(request, [], request.num_tokens)
        request.num_computed_tokens = request.num_tokens
        bm.cache_full_blocks(request)
    bm.free(done)
    held = {b: bm.blocks[b].block_hash for b in running.block_ids[:2]}
    assert bm.reset_prefix_cache() == 2  # a's two full blocks
    assert sorted(bm.cache.values()) == sorted(held) and bm.snapshot().cached == sorted(held)
    assert {b: bm.blocks[b].block_hash for b in held} == held and bm.num_free == 5
    assert bm.cached_prefix(_request("c", range(10))) == []
    assert bm.cached_prefix(_request("d", range(100, 109))) == running.block_ids[:2]
    bm.check_invariants([running])
    assert bm.reset_prefix_cache() == 0


def test_the_engine_forgets_the_idle_prefix_and_keeps_what_a_running_request_holds(tiny_model_dir):
    engine = LLMEngine(tiny_model_dir, EngineConfig(device="cpu", block_size=4, num_kv_blocks=64))
    engine.add_request(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True), request_id="a")
    while engine.has_unfinished:
        engine.step()
    engine.add_request(list(range(60, 77)), SamplingParams(max_tokens=20, ignore_eos=True), request_id="b")
    engine.step()  # b's 17-token prompt: 4 full blocks cached, held by b
    b_blocks = list(engine.requests["b"].block_ids)
    assert len(engine.block_manager.cached_prefix(_request("probe", PROMPT))) == 9  # a's prefix, before
    assert engine.reset_prefix_cache() == 10  # a's 10 full blocks (40 prompt + 1 generated tokens computed)
    assert engine.requests["b"].block_ids == b_blocks
    assert [engine.block_manager.ref_counts[b] for b in b_blocks] == [1] * len(b_blocks)
    engine.add_request(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True), request_id="again")
    engine.add_request(list(range(60, 77)) + [5], SamplingParams(max_tokens=2), request_id="b_prefix")
    record = engine.step().record
    assert record.admitted == {"again": 0, "b_prefix": 16}  # b's blocks still hit
    engine.block_manager.check_invariants(list(engine.scheduler.running))


def test_a_fresh_run_on_an_idle_engine_shows_the_pool_free_in_the_next_record(tiny_model_dir):
    llm = AsyncLLM(tiny_model_dir, device="cpu", num_kv_blocks=64)
    try:
        llm.wait_ready(120)
        records: list[dict] = []
        llm.subscribe(records.append)
        llm.add_request(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True)).collect()
        wait_until(lambda: records and records[-1]["finished"])
        assert records[-1]["kv"]["num_cached"] == 2
        seen = len(records)
        assert llm.reset_prefix_cache() == 2
        wait_until(lambda: len(records) > seen)  # one empty step tells the viewers
        kv = records[-1]["kv"]
        assert (kv["num_cached"], kv["cached"], kv["num_free"], records[-1]["num_rows"]) == (0, [], 64, 0)
        llm.add_request(PROMPT, SamplingParams(max_tokens=1), request_id="again").collect()
        assert next(r["admitted"] for r in records if "again" in r["admitted"]) == {"again": 0}
    finally:
        llm.shutdown()
    with pytest.raises(RuntimeError, match="the engine is stopped"):
        llm.reset_prefix_cache()


def test_the_fresh_run_button_says_how_many_blocks_it_freed_and_needs_the_key():
    calls = []
    llm = SimpleNamespace(reset_prefix_cache=lambda: calls.append(1) or 7)
    handlers = DashboardHandlers(llm, None, None, None, recorder=None, access=PresenterAccess("s3cret"))
    assert handlers.fresh_run("s3cret") == PAGE.both("fresh_run_done", blocks=7)
    assert "7" in PAGE.en("fresh_run_done", blocks=7) and "7" in PAGE.zh("fresh_run_done", blocks=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert handlers.fresh_run("guess") == PAGE.both("key_wrong")
    assert calls == [1]


def test_a_fresh_run_the_engine_cannot_take_is_said_not_raised():
    def dead() -> int:
        raise RuntimeError("the engine is dead: boom")

    handlers = DashboardHandlers(SimpleNamespace(reset_prefix_cache=dead), None, None, None,
                                 recorder=None, access=PresenterAccess(None))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        message = handlers.fresh_run("")
    assert message == PAGE.both("not_applied", reason="the engine is dead: boom")
    assert str(said[-1].message) == message
