"""Batched = solo (EngineConfig.batch_invariant): 16 prompts of mixed lengths, chunked under a small
budget and sharing a prefix (so some prefills are prefix-cache hits), give bit-identical
log-probabilities batched and each run alone (a fresh engine per prompt: other chunks, no cache),
on the default model and two tiny families. With it off the differences are counted and printed
(out/batch_invariance.json), not asserted: they are the point the dashboard's solo check shows."""
import json
import random
from pathlib import Path

import pytest
from kernels_here import needs_kernels

from engine import LLM, SamplingParams

REPORT = Path(__file__).resolve().parent.parent / "out" / "batch_invariance.json"
pytestmark = needs_kernels
PARAMS = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True, logprobs=3)
CONFIG = dict(device="cpu", max_num_batched_tokens=48, block_size=8)


def prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(3, 49152) for _ in range(24)]  # three whole blocks: prefix-cache hits
    lengths = [1, 2, 5, 17, 33, 64, 100, 150] * 2
    return [(shared if i % 3 == 0 else []) + [rng.randrange(3, 49152) for _ in range(n)]
            for i, n in enumerate(lengths)]


def logprobs(model: str, batch: list[list[int]], invariant: bool, cache_hits: list | None = None):
    llm = LLM(model, batch_invariant=invariant, **CONFIG)
    records = []
    outputs = llm.generate(batch, PARAMS, on_iteration=records.append)
    if cache_hits is not None:
        cache_hits.append(sum(sum(r.admitted.values()) for r in records))
    return [o.logprobs for o in outputs]


def differences(batched, alone) -> tuple[int, float]:
    """Requests whose log-probabilities differ at all, and the largest difference."""
    differ, largest = 0, 0.0
    for b, a in zip(batched, alone):
        gaps = [abs(b_tok[t] - a_tok[t]) for b_tok, a_tok in zip(b, a) for t in b_tok.keys() & a_tok.keys()]
        differ += b != a
        largest = max([largest, *gaps])
    return differ, largest


def record(key: str, result: dict) -> None:
    REPORT.parent.mkdir(exist_ok=True)
    data = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    data[key] = result
    REPORT.write_text(json.dumps(data, indent=1))


@pytest.mark.parametrize("family", ["default", "llama3", "qwen2"])
def test_batched_logprobs_are_the_bits_of_each_prompt_run_alone(family, tiny_model_dirs, capsys):
    if family == "default":
        from engine.loader import resolve_model_dir

        model = str(resolve_model_dir("default")[1])
    else:
        model = str(tiny_model_dirs[family])
    batch = prompts(7)
    result = {}
    for invariant in (True, False):
        hits = []
        batched = logprobs(model, batch, invariant, hits)
        alone = [logprobs(model, [prompt], invariant)[0] for prompt in batch]
        differ, largest = differences(batched, alone)
        result["on" if invariant else "off"] = {"requests_differing": differ, "max_logprob_difference": largest,
                                                "prefix_hit_tokens": hits[0]}
        if invariant:
            assert hits[0] > 0  # some prefills were prefix-cache hits
            assert batched == alone, f"{differ} of {len(batch)} requests differ, by up to {largest}"
    record(family, result)
    with capsys.disabled():
        print(f"\nbatch invariance, {family}: {result}")


def test_batch_invariance_needs_the_cpu_kernels():
    with pytest.raises(ValueError, match="batch_invariant"):
        LLM("default", batch_invariant=True, attention_backend="torch")
