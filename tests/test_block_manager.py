"""Paged KV bookkeeping: invariants after every step, no leaks, prefix cache, LRU eviction."""
import random

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.block_manager import BlockManager
from engine.detokenizer import IncrementalDetokenizer
from engine.request import Request


def live_requests(engine):
    return list(engine.scheduler.running)


def run_checked(engine, steps_before_abort=None, abort_ids=()):
    steps = 0
    while engine.has_unfinished:
        engine.step()
        steps += 1
        if steps == steps_before_abort:
            for rid in abort_ids:
                engine.abort_request(rid)
        engine.block_manager.check_invariants(live_requests(engine))
    return steps


@pytest.mark.parametrize("policy", ["mixed", "prefill_first"])
def test_invariants_hold_every_step_with_preemption_and_aborts(tiny_model_dir, policy):
    engine = LLMEngine(tiny_model_dir, EngineConfig(
        block_size=4, num_kv_blocks=32, max_num_batched_tokens=32, policy=policy))
    rng = random.Random(7)
    for i in range(12):
        prompt = [rng.randrange(3, 49152) for _ in range(rng.randint(1, 60))]
        engine.add_request(prompt, SamplingParams(max_tokens=rng.randint(1, 40), temperature=0.7, seed=i,
                                                  ignore_eos=True), request_id=f"q{i}")
    preempted = []
    while engine.has_unfinished:
        record = engine.step().record
        preempted += record.preempted
        if record.step == 5:
            engine.abort_request("q3")
            engine.abort_request("q9")
        engine.block_manager.check_invariants(live_requests(engine))
    assert preempted, "the pool was meant to be small enough to force preemption"
    assert engine.block_manager.num_free == 32
    assert not engine.requests


def test_abort_of_waiting_and_unknown_requests(tiny_model_dir):
    engine = LLMEngine(tiny_model_dir, EngineConfig(max_num_seqs=1))
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=3), request_id="a")
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=3), request_id="b")
    engine.step()
    assert engine.abort_request("b").finish_reason == "abort"  # still waiting
    assert engine.abort_request("nope") is None
    run_checked(engine)
    assert engine.block_manager.num_free == engine.config.num_kv_blocks


def _request(rid, tokens):
    return Request(rid, list(tokens), SamplingParams(), IncrementalDetokenizer(None), frozenset())


def test_prefix_cache_shares_full_blocks_and_evicts_lru():
    bm = BlockManager(num_blocks=6, block_size=4, enable_prefix_caching=True)
    first = _request("a", range(10))  # 2 full blocks + 2 tokens
    assert bm.admit(first, bm.cached_prefix(first), 10)
    first.num_computed_tokens = 10
    bm.cache_full_blocks(first)
    second = _request("b", list(range(8)) + [99, 98, 97])
    hits = bm.cached_prefix(second)
    assert hits == first.block_ids[:2]
    assert bm.admit(second, hits, 3)
    assert second.num_computed_tokens == 8
    assert [bm.ref_counts[b] for b in hits] == [2, 2]
    bm.check_invariants([first, second])
    bm.free(first)
    bm.free(second)
    assert bm.num_free == 6 and len(bm.cache) == 2  # freed, but still cached
    third = _request("c", range(9))
    assert bm.cached_prefix(third) == hits  # a hit on freed blocks revives them
    # Fill the pool with unrelated tokens: the cached blocks get evicted (LRU) and reused.
    big = _request("d", range(1000, 1024))
    assert bm.admit(big, [], 24)
    assert not bm.cache and bm.num_free == 0
    assert bm.cached_prefix(third) == []
    bm.free(big)
    bm.check_invariants([])


def _pool_after_computing(tokens, enable_prefix_caching: bool) -> BlockManager:
    bm = BlockManager(num_blocks=4, block_size=4, enable_prefix_caching=enable_prefix_caching)
    first = _request("a", tokens)
    bm.admit(first, [], len(first.prompt_token_ids))
    first.num_computed_tokens = len(first.prompt_token_ids)
    bm.cache_full_blocks(first)
    return bm


def test_whole_prompt_hit_still_computes_last_token():
    bm = _pool_after_computing(range(8), enable_prefix_caching=True)
    assert len(bm.cached_prefix(_request("b", range(8)))) == 1  # last block recomputed for logits


def test_prefix_caching_off_never_hits():
    bm = _pool_after_computing(range(8), enable_prefix_caching=False)
    assert bm.cached_prefix(_request("b", range(12))) == []
