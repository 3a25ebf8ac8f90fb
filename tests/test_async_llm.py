"""AsyncLLM: concurrent adds from threads and asyncio, aborts, subscribers, presenter controls."""
import asyncio
import threading
import time

import pytest

from engine import AsyncLLM, SamplingParams
from engine.telemetry import validate_record

from support.faults import fail_next_forward


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    front = AsyncLLM(tiny_model_dir, max_num_batched_tokens=64)
    front.wait_ready(120)
    yield front
    front.shutdown()


def test_threads_and_tasks_stream_concurrently(llm):
    records = []
    unsubscribe = llm.subscribe(records.append)
    results = {}

    def worker(i):
        stream = llm.add_request([100 + i] * (i + 1), SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
        results[i] = stream.collect()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()

    async def in_loop():
        streams = [llm.add_request("hello world", SamplingParams(max_tokens=5, temperature=0)) for _ in range(3)]
        return await asyncio.gather(*(s.result() for s in streams))

    async_outputs = asyncio.run(in_loop())
    for t in threads:
        t.join(30)
    unsubscribe()
    assert all(len(results[i].token_ids) == 6 and results[i].finish_reason == "length" for i in range(6))
    assert len({tuple(o.token_ids) for o in async_outputs}) == 1  # same greedy prompt, same output
    for record in records:
        validate_record(record)
    seen = {s["request_id"] for r in records for s in r["segments"]}
    assert {o.request_id for o in async_outputs} <= seen
    assert any(len(r["segments"]) > 1 for r in records), "requests should share steps"


def test_abort_frees_blocks_and_ends_stream(llm):
    stream = llm.add_request([7] * 50, SamplingParams(max_tokens=400, temperature=0, ignore_eos=True))
    deltas = iter(stream)
    next(deltas)
    llm.abort(stream.request_id)
    rest = list(deltas)
    assert rest[-1].finish_reason == "abort"
    deadline = time.time() + 5
    while time.time() < deadline and llm.engine.block_manager.num_free != llm.config.num_kv_blocks:
        time.sleep(0.05)
    assert llm.engine.block_manager.num_free == llm.config.num_kv_blocks


def test_pause_step_resume(llm):
    llm.pause()
    steps = []
    unsubscribe = llm.subscribe(lambda r: steps.append(r["step"]))
    stream = llm.add_request([9, 9, 9], SamplingParams(max_tokens=5, temperature=0, ignore_eos=True))
    time.sleep(0.3)
    assert steps == []
    llm.step_once()
    deadline = time.time() + 5
    while not steps and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert len(steps) == 1
    llm.resume()
    assert stream.collect().finish_reason == "length"
    unsubscribe()


def test_fault_fails_only_that_step(llm):
    fail_next_forward(llm, RuntimeError("injected"))
    failed = llm.add_request([3, 4], SamplingParams(max_tokens=3)).collect()
    assert failed.finish_reason == "error" and "injected" in failed.error
    ok = llm.add_request([3, 4], SamplingParams(max_tokens=3, ignore_eos=True)).collect()
    assert ok.finish_reason == "length"


def test_validation_errors_raise_in_the_caller(llm):
    with pytest.raises(ValueError, match="prompt"):
        llm.add_request("")
    with pytest.raises(ValueError, match="already in use"):
        llm.add_request([1], SamplingParams(max_tokens=200), request_id="dup")
        llm.add_request([1], SamplingParams(max_tokens=200), request_id="dup")
    llm.abort("dup")
    with pytest.raises(ValueError, match="reconfigure"):
        llm.reconfigure(block_size=3)
    with pytest.raises(ValueError, match="policy"):
        llm.reconfigure(policy="nope")


def test_a_crash_outside_the_forward_pass_fails_live_requests_and_serving_goes_on(llm, monkeypatch):
    records = []
    unsubscribe = llm.subscribe(records.append)
    original = llm.engine._postprocess
    calls = {"n": 0}

    def broken_once(*args):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("bug")
        return original(*args)

    monkeypatch.setattr(llm.engine, "_postprocess", broken_once)
    failed = llm.add_request([5, 6, 7], SamplingParams(max_tokens=3)).collect()
    assert failed.finish_reason == "error" and "internal engine error" in failed.error
    ok = llm.add_request([5, 6, 7], SamplingParams(max_tokens=3, ignore_eos=True)).collect()
    assert ok.finish_reason == "length"
    unsubscribe()
    reported = {rid: state["status"] for r in records for rid, state in r["requests"].items()}
    assert reported[failed.request_id] == "finished"  # the failed request's end is in a record
    assert llm.engine.block_manager.num_free == llm.config.num_kv_blocks


def test_shutdown_ends_open_streams_and_refuses_new_requests(tiny_model_dir):
    front = AsyncLLM(tiny_model_dir, num_kv_blocks=64)
    front.wait_ready(60)
    front.pause()
    stream = front.add_request([5, 6], SamplingParams(max_tokens=5))
    front.shutdown()
    out = stream.collect()
    assert out.finish_reason == "abort" and out.error == "the engine stopped"
    with pytest.raises(RuntimeError, match="stopped"):
        front.add_request([5, 6])
