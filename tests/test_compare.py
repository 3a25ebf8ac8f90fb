"""Compare: one arrival pattern through two engine configurations, one after the other, on
engines of their own (tiny model): what each side ran, that the live engine was left alone,
one compare at a time, the presenter key, and patterns from presets and from a trace."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from viz.compare.controls import CompareHandlers
from viz.compare.pattern import MAX_OUTPUT_TOKENS, MAX_REQUESTS, preset_pattern, trace_pattern
from viz.compare.routes import install_compare_routes
from viz.compare.runner import CompareBusy, CompareRunner, CompareSide
from viz.traces.trace import load_trace
from viz.ui.presenter import PresenterAccess
from viz.ui.presets import load_presets

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.jsonl*"))
SIDES = (CompareSide("A", "mixed", 512), CompareSide("B", "prefill_first", 512))


@pytest.fixture(scope="module")
def live(tiny_model_dir):
    from engine import AsyncLLM

    llm = AsyncLLM(tiny_model_dir, num_kv_blocks=256)
    llm.wait_ready(120)
    records = []
    llm.subscribe(records.append)
    yield llm, records
    llm.shutdown()


def wait_done(runner: CompareRunner, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while runner.state()["state"] == "running":
        assert time.monotonic() < deadline, "the compare did not finish"
        time.sleep(0.1)
    return runner.state()


@pytest.fixture(scope="module")
def article(live, tiny_model_dir):
    llm, live_records = live
    runner = CompareRunner(tiny_model_dir, {"num_kv_blocks": 256})
    pattern = preset_pattern(load_presets(), "article", llm.tokenizer)
    runner.start(pattern, SIDES)
    with pytest.raises(CompareBusy):
        runner.start(pattern, SIDES)
    state = wait_done(runner)
    return runner, pattern, state, len(live_records)


def stalled(record: dict) -> list[str]:
    scheduled = {s["request_id"] for s in record["segments"]}
    return [rid for rid, info in record["requests"].items() if info["status"] == "decoding" and rid not in scheduled]


def test_both_sides_run_the_same_requests_under_their_own_configuration(article):
    runner, pattern, state, _ = article
    assert state["state"] == "done", state
    result = runner.result()
    ids = [p.request_id for p in pattern.planned]
    assert [r["request_id"] for r in result["pattern"]["requests"]] == ids
    assert [r["prompt_tokens"] for r in result["pattern"]["requests"]] == [499, 200, 100]
    tokens = {}
    for side, expected in zip(result["sides"], SIDES, strict=True):
        records = side["records"]
        assert side["config"] == {"policy": expected.policy, "max_num_batched_tokens": expected.budget}
        assert {r["policy"] for r in records} == {expected.policy}
        assert {r["token_budget"] for r in records} == {expected.budget}
        assert [a["request_id"] for a in side["arrivals"]] == ids
        finished = {rid for r in records for rid in r["finished"]}
        assert finished == set(ids)
        counts = {rid: sum(rid in r["sampled"] for r in records) for rid in ids}
        tokens[side["label"]] = counts
        assert all(r["kv"].get("ref_counts") is None and r["block_tables"] == {} for r in records)
    assert tokens["A"] == tokens["B"] == {p.request_id: p.params.max_tokens for p in pattern.planned}
    a, b = (side["records"] for side in result["sides"])
    assert not any(stalled(r) for r in a)  # mixed: every running decode gets its row
    assert any(stalled(r) for r in b)  # prefill_first: decodes stall while a prompt is prefilled


def test_the_live_engine_is_left_alone(article, live):
    _, _, _, live_steps = article
    llm, live_records = live
    assert len(live_records) == live_steps == 0
    assert llm.config.policy == "mixed" and llm.state == "ready"


def test_a_trace_pattern_keeps_its_arrivals_bounded(live):
    llm, _ = live
    trace = load_trace(SHIPPED[0])
    pattern = trace_pattern(trace, SHIPPED[0].name, load_presets(), llm.tokenizer)
    arrivals = [e for e in trace.events if e["kind"] == "arrival"]
    assert len(pattern.planned) == min(len(arrivals), MAX_REQUESTS)
    assert all(p.params.max_tokens <= MAX_OUTPUT_TOKENS and p.params.temperature == 0
               and p.params.ignore_eos for p in pattern.planned)
    delays = [p.delay_s for p in pattern.planned]
    assert delays[0] == 0 and delays == sorted(delays)
    gap = arrivals[3]["time"] - arrivals[2]["time"]
    assert delays[3] - delays[2] == pytest.approx(min(gap, 5.0))
    assert pattern.capped  # its outputs are longer than a compare runs
    assert pattern.planned[0].prompt == arrivals[0]["prompt"]


def test_the_presenter_key_gates_a_compare_and_nothing_starts_without_it(live, tiny_model_dir):
    llm, _ = live
    runner = CompareRunner(tiny_model_dir, {})
    handlers = CompareHandlers(runner, llm, load_presets(), PresenterAccess(key="sesame"))
    args = ("article", "mixed", 512, "prefill_first", 512, 0)
    with pytest.warns(UserWarning) as warned:  # gr.Warning: the visitor is told
        assert "presenter key" in handlers.run(*args, "")
        assert "wrong" in handlers.run(*args, "nope")
        assert "Not compared" in handlers.run("article", "fastest", 512, "mixed", 512, 0, "sesame")
    assert len(warned) == 3
    assert runner.state() == {"state": "idle", "latest": None}


def test_the_routes_say_idle_then_serve_the_latest_result(article):
    runner = article[0]
    idle = FastAPI()
    install_compare_routes(idle, CompareRunner("unused", {}))
    with TestClient(idle) as client:
        assert client.get("/compare/state").json() == {"state": "idle", "latest": None}
        assert client.get("/compare/result").status_code == 404
    app = FastAPI()
    install_compare_routes(app, runner)
    with TestClient(app) as client:
        state = client.get("/compare/state").json()
        assert state["state"] == "done" and state["latest"] == state["id"]
        result = client.get("/compare/result").json()
        assert result["id"] == state["id"] and len(result["sides"]) == 2


def test_each_sides_engine_is_gone_when_the_compare_is_done(live, tiny_model_dir):
    """A Compare loads two engines of the live model: both must be freed (and their memory
    given back) when it is done, not at the next full garbage collection minutes later
    (benchmarks.soak: each Compare of the default model held 0.7-1.7 GB for 2-3 minutes)."""
    import gc
    import weakref

    from viz.compare.runner import default_engine

    llm, _ = live
    made = []

    def tracked(model: str, **options):
        engine = default_engine(model, **options)
        made.append(weakref.ref(engine))
        return engine

    runner = CompareRunner(tiny_model_dir, {"num_kv_blocks": 64}, make_engine=tracked)
    gc.disable()  # no collection by chance: the runner itself must free them
    try:
        runner.start(preset_pattern(load_presets(), "article", llm.tokenizer), SIDES)
        assert wait_done(runner)["state"] == "done"
        assert [ref() is None for ref in made] == [True, True]
    finally:
        gc.enable()
