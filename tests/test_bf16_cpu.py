"""bfloat16 as the engine dtype on CPU: greedy tokens agree with transformers in bfloat16.

Exactness is not expected: the engine's bf16 mode on CPU keeps fp32 activations between its bf16
GEMMs (transformers keeps bf16 ones), and oneDNN's bf16 GEMMs accumulate in their own order, so
near-ties flip. The agreement is reported (test output and out/correctness.json) and only a
gross failure fails the test. fp32 stays the
token-exact mode (test_correctness.py).
"""
import random

import pytest
import torch
from test_correctness import record_result

from engine import LLM, SamplingParams

from hf_reference import hf_greedy

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def default_model() -> str:
    from engine.loader import resolve_model_dir

    return str(resolve_model_dir("default")[1])


def bf16_reference(model_dir: str, prompts: list[list[int]]) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    return hf_greedy(hf, prompts, MAX_TOKENS)


def test_default_model_bf16_agrees_with_transformers_bf16(default_model, capsys):
    rng = random.Random(5)
    prompts = [[rng.randrange(100, 49152) for _ in range(rng.choice([3, 17, 64, 150]))] for _ in range(12)]
    llm = LLM(default_model, device="cpu", dtype="bfloat16", max_num_batched_tokens=64)
    assert llm.engine.runner.k_cache.dtype == torch.bfloat16
    outputs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True))
    refs = bf16_reference(default_model, prompts)
    assert all(len(o.token_ids) == MAX_TOKENS for o in outputs)
    exact = sum(o.token_ids == r for o, r in zip(outputs, refs))
    prefix = [next((i for i, (a, b) in enumerate(zip(r, o.token_ids)) if a != b), MAX_TOKENS)
              for o, r in zip(outputs, refs)]
    first = sum(o.token_ids[0] == r[0] for o, r in zip(outputs, refs))
    agreement = {"prompts": len(prompts), "exact_sequences": exact, "first_token": first,
                 "matching_prefix_fraction": round(sum(prefix) / (MAX_TOKENS * len(prompts)), 3)}
    record_result("default/bf16_vs_transformers_bf16", _Counts(exact), agreement)
    with capsys.disabled():
        print(f"\nbf16 CPU vs transformers bf16: {agreement}")
    assert agreement["matching_prefix_fraction"] >= 0.5, agreement  # far below: something is broken


class _Counts:
    """What record_result reads from a comparison."""

    def __init__(self, exact: int):
        self.exact = exact
        self.near_ties = []
