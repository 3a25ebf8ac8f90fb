"""Greedy outputs equal transformers generate token by token (fp32, CPU).

Many prompts of mixed lengths run together in one engine, under both policies, with small
chunk budgets, with prefix caching on shared prefixes, and with a pool small enough to force
preemption. A difference is accepted only at a near-tie of transformers' own top-2 logits.
"""
import json
import random
from pathlib import Path

import pytest
from hf_reference import compare, hf_greedy, load_hf
from tiny_models import FAMILIES

from engine import LLM, SamplingParams

MAX_TOKENS = 10
REPORT = Path(__file__).resolve().parent.parent / "out" / "correctness.json"


def mixed_prompts(n: int, seed: int, shared_prefix: int = 0, max_len: int = 200) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(3, 49152) for _ in range(shared_prefix)]
    lengths = [rng.choice([1, 2, 5, 17, 33, 64, 100, max_len]) for _ in range(n)]
    return [prefix + [rng.randrange(3, 49152) for _ in range(k)] for k in lengths]


SCENARIOS = {
    # name: (engine config, shared prefix length)
    "mixed_chunk16": (dict(policy="mixed", max_num_batched_tokens=16), 0),
    "prefill_first_chunk48": (dict(policy="prefill_first", max_num_batched_tokens=48), 0),
    "mixed_no_chunking": (dict(policy="mixed", enable_chunked_prefill=False), 0),
    "prefix_cache": (dict(max_num_batched_tokens=64, block_size=8), 40),
    "preemption": (dict(max_num_batched_tokens=64, block_size=4, num_kv_blocks=80), 0),
}


def record_result(key: str, comparison, extra: dict) -> None:
    REPORT.parent.mkdir(exist_ok=True)
    data = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    data[key] = {"exact": comparison.exact, "near_ties": comparison.near_ties, **extra}
    REPORT.write_text(json.dumps(data, indent=1))


def run_scenario(model_dir: str, hf, name: str, seed: int, n: int = 16):
    config, shared = SCENARIOS[name]
    prompts = mixed_prompts(n, seed, shared_prefix=shared)
    refs = hf_greedy(hf, prompts, MAX_TOKENS)
    llm = LLM(model_dir, device="cpu", dtype="float32", **config)  # the reference is CPU fp32
    records = []
    outputs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True),
                           on_iteration=records.append)
    comparison = compare(hf, prompts, refs, outputs)
    stats = {
        "steps": len(records),
        "mixed_steps": sum(1 for r in records if len({s.kind == "decode" for s in r.segments}) == 2),
        "preemptions": sum(len(r.preempted) for r in records),
        "prefix_hit_tokens": sum(sum(r.admitted.values()) for r in records),
    }
    assert llm.engine.block_manager.num_free == llm.config.num_kv_blocks  # nothing leaked
    return comparison, stats


def assert_scenario_happened(name: str, stats: dict) -> None:
    if name == "prefix_cache":
        assert stats["prefix_hit_tokens"] > 0
    if name == "preemption":
        assert stats["preemptions"] > 0
    if name.startswith("mixed_chunk"):
        assert stats["mixed_steps"] > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_families_match_transformers(family, tiny_model_dirs):
    model_dir = str(tiny_model_dirs[family])
    hf = load_hf(model_dir)
    for i, name in enumerate(SCENARIOS):
        comparison, stats = run_scenario(model_dir, hf, name, seed=i)
        record_result(f"{family}/{name}", comparison, stats)
        comparison.assert_ok()
        assert_scenario_happened(name, stats)


@pytest.fixture(scope="module")
def default_model():
    from engine.loader import resolve_model_dir

    return str(resolve_model_dir("default")[1])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_default_model_matches_transformers(name, default_model):
    hf = load_hf(default_model)
    comparison, stats = run_scenario(default_model, hf, name, seed=100)
    record_result(f"default/{name}", comparison, stats)
    comparison.assert_ok()
    assert_scenario_happened(name, stats)
