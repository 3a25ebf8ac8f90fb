"""EngineConfig is frozen: resolving it for a device and a model, and reconfiguring it between
steps, give new configs; a reconfiguration says what it changed (a raised budget included) and
the steps after it run (and record) the new settings; nothing rewrites what a caller asked."""
from __future__ import annotations

import dataclasses
import logging

import pytest

from engine import AsyncLLM, SamplingParams, cpu_kernels
from engine.config import EngineConfig


def resolved(**asked) -> EngineConfig:
    return EngineConfig.from_kwargs(device="cpu", **asked).for_device().for_model(2048, bytes_per_token=64)


def test_the_config_cannot_be_edited_in_place():
    config = resolved()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_num_batched_tokens = 8


def test_resolving_gives_a_new_config_and_leaves_the_asked_one_as_it_was():
    asked = EngineConfig.from_kwargs(device="cpu")
    config = asked.for_device().for_model(2048, bytes_per_token=64)
    assert (asked.attention_backend, asked.dtype, asked.block_size, asked.max_model_len) == ("auto", "auto", None, None)
    assert (config.attention_backend, config.dtype, config.block_size, config.max_model_len) == \
        ("cpu", "float32", 16, 2048)


def test_a_budget_too_small_for_a_whole_prompt_is_raised_and_said(caplog):
    with caplog.at_level(logging.WARNING, logger="engine.config"):
        config = resolved(enable_chunked_prefill=False, max_num_batched_tokens=256)
    assert config.max_num_batched_tokens == 2048
    assert "max_num_batched_tokens 256 raised to 2048" in caplog.text


def test_reconfigured_returns_a_new_config_and_what_changed():
    config = resolved(max_num_batched_tokens=64)
    new, changed = config.reconfigured(policy="prefill_first", max_num_batched_tokens=64)
    assert changed == {"policy": ("mixed", "prefill_first")} and config.policy == "mixed"
    unchunked, changed = new.reconfigured(enable_chunked_prefill=False)
    assert changed == {"enable_chunked_prefill": (True, False), "max_num_batched_tokens": (64, 2048)}
    assert new.reconfigured()[1] == {}


@pytest.mark.parametrize("changes, said", [({"block_size": 8}, "cannot change"), ({"policy": "fifo"}, "policy"),
                                           ({"max_num_batched_tokens": 0}, "positive integer"),
                                           ({"batch_invariant": "yes"}, "True or False"),
                                           ({"max_num_batched_tokens": 99_999_999}, "at most 131072"),
                                           ({"enable_chunked_prefill": "no"}, "True or False")])
def test_a_reconfiguration_that_cannot_hold_is_refused(changes, said):
    with pytest.raises(ValueError, match=said):
        resolved().reconfigured(**changes)


def test_the_token_budget_is_bounded_by_what_one_step_can_hold():
    """64 sequences of at most 2048 tokens: no step holds more than 131072 tokens, so a larger
    budget changes nothing and can only be a typo; it is refused, at start and between steps."""
    config = resolved()
    assert config.max_token_budget == 64 * 2048
    assert config.reconfigured(max_num_batched_tokens=131072)[0].max_num_batched_tokens == 131072
    with pytest.raises(ValueError, match="max_num_batched_tokens must be at most 131072 "
                                         r"\(max_num_seqs 64 times max_model_len 2048\), got 131073"):
        config.reconfigured(max_num_batched_tokens=131073)
    with pytest.raises(ValueError, match="at most 2048"):
        resolved(max_num_seqs=1, max_num_batched_tokens=4096)  # bounded once max_model_len is known
    with pytest.raises(ValueError, match="at most 512"):
        EngineConfig.from_kwargs(max_num_seqs=2, max_model_len=256, max_num_batched_tokens=513)
    assert EngineConfig.from_kwargs(max_num_batched_tokens=99_999_999).max_token_budget is None  # (unresolved)


def test_the_steps_after_a_reconfigure_run_and_record_the_new_settings(tiny_model_dir):
    llm = AsyncLLM(tiny_model_dir, device="cpu", num_kv_blocks=64, max_num_batched_tokens=32)
    try:
        llm.wait_ready(120)
        before = llm.config
        records = []
        unsubscribe = llm.subscribe(records.append)
        llm.add_request(list(range(3, 43)), SamplingParams(max_tokens=2, ignore_eos=True)).collect()
        invariant = cpu_kernels.load() is not None  # (batch invariance needs them)
        changed = llm.reconfigure(max_num_batched_tokens=16, policy="prefill_first", batch_invariant=invariant)
        assert changed == {"policy": ("mixed", "prefill_first"), "max_num_batched_tokens": (32, 16),
                           **({"batch_invariant": (False, True)} if invariant else {})}
        llm.add_request(list(range(50, 90)), SamplingParams(max_tokens=2, ignore_eos=True)).collect()
        unsubscribe()
        assert before.max_num_batched_tokens == 32 and llm.config is not before  # replaced, not edited
        assert (llm.config.max_num_batched_tokens, llm.config.policy) == (16, "prefill_first")
        settings = [(r["token_budget"], r["policy"], r["source"]["plan"]["batch_invariant"]) for r in records]
        assert settings[0] == (32, "mixed", False) and settings[-1] == (16, "prefill_first", invariant)
        assert max(r["num_rows"] for r in records if r["token_budget"] == 16) == 16  # a new 40-token prompt, chunked
    finally:
        llm.shutdown()


def test_batch_invariance_is_refused_where_the_plan_fell_back_to_torchs_attention(tiny_model_dir, monkeypatch):
    from engine import LLM

    monkeypatch.setattr("engine.attention.cpu_backend.cpu_kernels.load", lambda: None)
    engine = LLM(tiny_model_dir, device="cpu", num_kv_blocks=32).engine
    assert (engine.config.attention_backend, engine.runner.plan.attention) == ("cpu", "torch")
    with pytest.raises(ValueError, match="batch_invariant needs the CPU kernels; this engine runs attention 'torch'"):
        engine.reconfigure(batch_invariant=True)
    assert engine.config.batch_invariant is False


def test_the_dashboards_apply_shows_the_budget_the_engine_will_run(tiny_model_dir):
    from viz.ui.handlers import effective_budget

    llm = AsyncLLM(tiny_model_dir, device="cpu", num_kv_blocks=64, max_model_len=256)
    try:
        llm.wait_ready(120)
        assert effective_budget(llm, 64, chunked=True) == 64
        assert effective_budget(llm, 64, chunked=False) == 256  # a whole prompt fits one step
        assert llm.reconfigure(max_num_batched_tokens=64, enable_chunked_prefill=False) == {
            "enable_chunked_prefill": (True, False), "max_num_batched_tokens": (512, 256)}
    finally:
        llm.shutdown()
