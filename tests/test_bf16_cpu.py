"""bfloat16 as the engine dtype on CPU: greedy tokens agree with transformers, in bfloat16 or fp32.

Exactness is not expected: the engine's bf16 mode on CPU keeps fp32 activations between its bf16
GEMMs (transformers keeps bf16 ones), and oneDNN's bf16 GEMMs accumulate in their own order, so
near-ties flip. Where the CPU lacks bf16 dot products (AVX2) the linears also multiply x in fp32
(the widening kernel), and the engine's bf16 tracks the fp32 model more closely than transformers'
bf16 does: on a Zen 3, 94% of the greedy tokens' prefixes agree with transformers in fp32, 48% with
transformers in bf16, whose own agreement with fp32 is 54%. The agreement with both is reported
(test output and out/correctness.json), and only being far from both fails the test. fp32 stays the
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


def reference(model_dir: str, prompts: list[list[int]], dtype: torch.dtype) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
    return hf_greedy(hf, prompts, MAX_TOKENS)


def matching_prefix_fraction(outputs: list[list[int]], refs: list[list[int]]) -> float:
    prefix = [next((i for i, (a, b) in enumerate(zip(r, o)) if a != b), MAX_TOKENS) for o, r in zip(outputs, refs)]
    return round(sum(prefix) / (MAX_TOKENS * len(refs)), 3)


def test_default_model_bf16_agrees_with_transformers_bf16(default_model, capsys):
    rng = random.Random(5)
    prompts = [[rng.randrange(100, 49152) for _ in range(rng.choice([3, 17, 64, 150]))] for _ in range(12)]
    llm = LLM(default_model, device="cpu", dtype="bfloat16", max_num_batched_tokens=64)
    assert llm.engine.runner.k_cache.dtype == torch.bfloat16
    outputs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True))
    refs, truth = reference(default_model, prompts, torch.bfloat16), reference(default_model, prompts, torch.float32)
    assert all(len(o.token_ids) == MAX_TOKENS for o in outputs)
    tokens = [o.token_ids for o in outputs]
    exact = sum(o == r for o, r in zip(tokens, refs))
    first = sum(o[0] == r[0] for o, r in zip(tokens, refs))
    agreement = {"prompts": len(prompts), "exact_sequences": exact, "first_token": first,
                 "matching_prefix_fraction": matching_prefix_fraction(tokens, refs),
                 "matching_prefix_fraction_vs_fp32": matching_prefix_fraction(tokens, truth),
                 "transformers_bf16_vs_fp32": matching_prefix_fraction(refs, truth)}
    record_result("default/bf16_vs_transformers_bf16", _Counts(exact), agreement)
    with capsys.disabled():
        print(f"\nbf16 CPU vs transformers bf16 (and fp32): {agreement}")
    closest = max(agreement["matching_prefix_fraction"], agreement["matching_prefix_fraction_vs_fp32"])
    assert closest >= 0.5, agreement  # far below both references: something is broken


class _Counts:
    """What record_result reads from a comparison."""

    def __init__(self, exact: int):
        self.exact = exact
        self.near_ties = []
