"""Log-probabilities: what a request that asks (``SamplingParams(logprobs=k)``) gets back per
generated token equals transformers' log-softmax of its own logits at that position (fp32, CPU),
for many prompts batched together with chunked prefill, on tiny models and the default model."""
import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.sampler import token_logprobs

from hf_reference import load_hf

TOP = 5
TOLERANCE = 2e-4  # fp32: two implementations of the same model, different reduction orders


def prompts(seed: int, n: int = 6) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 49152) for _ in range(k)] for k in rng.choices([1, 3, 17, 40, 90], k=n)]


@torch.inference_mode()
def hf_logprobs(hf, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """transformers' log-softmax at every position that produced a generated token."""
    logits = hf(torch.tensor([prompt + generated[:-1]])).logits[0, len(prompt) - 1:]
    return torch.log_softmax(logits.float(), dim=-1)


def check_against_transformers(model_dir: str, params: SamplingParams, seed: int) -> int:
    """Every reported logprob within TOLERANCE of transformers'; the top k are transformers'
    top k (up to near-ties). Returns how many values were compared."""
    hf = load_hf(model_dir)
    llm = LLM(model_dir, device="cpu", dtype="float32", max_num_batched_tokens=32)
    batch = prompts(seed)
    compared = 0
    for prompt, out in zip(batch, llm.generate(batch, params)):
        assert len(out.logprobs) == len(out.token_ids) == params.max_tokens
        reference = hf_logprobs(hf, prompt, out.token_ids)
        for position, (token, entry) in enumerate(zip(out.token_ids, out.logprobs)):
            expected = reference[position]
            assert token in entry
            assert len(entry) in (params.logprobs, params.logprobs + 1)
            ids = list(entry)
            got = torch.tensor([entry[i] for i in ids])
            assert torch.allclose(got, expected[ids], atol=TOLERANCE, rtol=0), (position, ids)
            top = ids[:params.logprobs]
            kth_best = expected.topk(params.logprobs).values[-1]
            assert bool((expected[top] >= kth_best - TOLERANCE).all())  # the real top k, near-ties aside
            assert got[:params.logprobs].tolist() == sorted(got[:params.logprobs].tolist(), reverse=True)
            compared += len(ids)
    return compared


@pytest.mark.parametrize("family", ["smollm2", "qwen3", "llama2_untied"])
def test_greedy_logprobs_equal_transformers_tiny(family, tiny_model_dirs):
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True, logprobs=TOP)
    assert check_against_transformers(str(tiny_model_dirs[family]), params, seed=1) > 0


def test_greedy_logprobs_equal_transformers_default_model():
    from engine.loader import resolve_model_dir

    params = SamplingParams(max_tokens=5, temperature=0, ignore_eos=True, logprobs=TOP)
    assert check_against_transformers(str(resolve_model_dir("default")[1]), params, seed=2) > 0


def test_logprobs_are_the_models_raw_distribution_whatever_the_sampling(tiny_model_dir):
    """Temperature and top-p change what is drawn, not the reported log-probabilities."""
    params = SamplingParams(max_tokens=4, temperature=1.7, top_p=0.5, seed=3, ignore_eos=True, logprobs=2)
    check_against_transformers(tiny_model_dir, params, seed=4)


def test_zero_gives_the_sampled_token_alone_and_none_gives_nothing(tiny_model_dir):
    llm = LLM(tiny_model_dir, device="cpu")
    asked, plain = llm.generate([[5, 6, 7], [5, 6, 7]], [
        SamplingParams(max_tokens=3, temperature=0, ignore_eos=True, logprobs=0),
        SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)])
    assert [list(entry) for entry in asked.logprobs] == [[t] for t in asked.token_ids]
    assert all(v <= 0 for entry in asked.logprobs for v in entry.values())
    assert plain.logprobs is None and plain.token_ids == asked.token_ids


@pytest.mark.parametrize("value", [-1, 21, 2.0, True, "5"])
def test_out_of_range_is_refused_with_the_limit(value):
    with pytest.raises(ValueError, match=r"logprobs must be None or an integer in \[0, 20\]"):
        SamplingParams(logprobs=value)


def test_streamed_deltas_carry_each_tokens_logprobs(tiny_model_dir):
    from engine import AsyncLLM

    llm = AsyncLLM(tiny_model_dir, device="cpu")
    try:
        llm.wait_ready(120)
        stream = llm.add_request([5, 6, 7], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True,
                                                           logprobs=3))
        deltas = list(stream)
    finally:
        llm.shutdown()
    with_tokens = [d for d in deltas if d.token_ids]
    assert all(len(d.logprobs) == len(d.token_ids) for d in with_tokens)
    assert sum(len(d.token_ids) for d in with_tokens) == 4
    first = with_tokens[0].logprobs[0]
    assert list(first.logprobs) == list(first.logits)  # the raw logits of the same ids


def test_rows_asking_different_ks_each_get_their_own_row_alone():
    """One log-softmax and one topk a distinct k over the step's rows: each row's answer is what it
    gets alone (the same bits), the sampled token after its top k when it is not among them."""
    logits = torch.randn(6, 3000, generator=torch.Generator().manual_seed(3)) * 4
    tokens = [5, int(logits[1].argmax()), 7, int(logits[3].argmin()), 11, 12]
    params = [SamplingParams(logprobs=k) for k in (None, 2, 0, 2, 3, None)]
    together = token_logprobs(logits, tokens, params)
    for row, (token, p) in enumerate(zip(tokens, params)):
        alone = token_logprobs(logits[row:row + 1], [token], [p])[0]
        assert together[row] == alone
    assert together[0] is None and together[5] is None
    assert list(together[2].logprobs) == [7]
    lp = torch.log_softmax(logits[3], dim=-1)
    assert list(together[3].logprobs) == [*lp.topk(2).indices.tolist(), tokens[3]]
    assert together[3].logits[tokens[3]] == float(logits[3, tokens[3]])
    assert len(together[1].logprobs) == 2 and tokens[1] in together[1].logprobs
