"""Every record says which kernels ran (``source["plan"]``, engine/execution_plan.py), the same
plan the engine logs at start and the model info carries for the dashboard's header."""
from __future__ import annotations

import logging

from engine import LLM, SamplingParams
from engine.telemetry import validate_record


def test_every_record_names_the_plan_that_ran_and_the_log_says_it_once(tiny_model_dir, caplog):
    caplog.set_level(logging.INFO, logger="engine.model_runner")
    llm = LLM(tiny_model_dir, num_kv_blocks=64)
    records = []
    engine = llm.engine
    plan = engine.runner.plan
    engine.add(engine.make_request([5, 6, 7, 8], SamplingParams(max_tokens=2)))
    while engine.has_unfinished:
        records.append(engine.step().record.to_dict())
    assert records
    for record in records:
        validate_record(record)
        assert record["source"]["plan"] == {**plan.to_dict(), "batch_invariant": False}
    assert plan.device == "cpu" and plan.attention in ("cpu", "torch")
    assert plan.linear in ("c-kernel", "onednn", "torch")
    assert [r.getMessage() for r in caplog.records if "execution plan" in r.getMessage()] == [
        f"execution plan: {plan.summary()}"]


def test_the_model_info_carries_the_plan_for_the_header(tiny_model_dir):
    from engine.info import trace_header

    llm = LLM(tiny_model_dir, num_kv_blocks=64)
    header = trace_header(llm.engine)
    assert header["plan"]["summary"] == llm.engine.runner.plan.summary()
    assert "linears" in header["plan"]["summary"] and "attention" in header["plan"]["summary"]
