"""Sampling: seeded reproducibility, top-k/top-p/min-p supports, stop strings, streaming text."""
import pytest
import torch

from engine import LLM, SamplingParams, cpu_kernels
from engine.detokenizer import IncrementalDetokenizer
from engine.sampler import Sampler, cdf_block

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])


def support(params: SamplingParams, draws: int = 400) -> set[int]:
    sampler = Sampler(seed=0, device=torch.device("cpu"))
    logits = PROBS.log().repeat(draws, 1)
    return set(sampler(logits, [params] * draws, [None] * draws))


@pytest.mark.parametrize("params, expected", [
    (SamplingParams(temperature=1.0), {0, 1, 2, 3}),
    (SamplingParams(temperature=1.0, top_k=2), {0, 1}),
    (SamplingParams(temperature=1.0, top_p=0.7), {0, 1}),  # 0.5 + 0.3 >= 0.7
    (SamplingParams(temperature=1.0, top_p=0.85), {0, 1, 2}),
    (SamplingParams(temperature=1.0, min_p=0.2), {0, 1, 2}),  # p >= 0.2 * 0.5
    (SamplingParams(temperature=1.0, min_p=0.7), {0}),
    (SamplingParams(temperature=0), {0}),
])
def test_filters_restrict_the_support(params, expected):
    assert support(params) == expected


@pytest.mark.parametrize("params, expected", [
    (SamplingParams(temperature=1.0), PROBS),
    (SamplingParams(temperature=1.0, top_k=2), torch.tensor([0.625, 0.375, 0, 0])),  # renormalised
    (SamplingParams(temperature=0.5), PROBS ** 2 / (PROBS ** 2).sum()),
])
def test_draws_follow_the_distribution(params, expected):
    """Frequencies over 40,000 draws within 0.01 of the distribution (4.5 sigma at p = 0.5),
    filtered tokens never; seeded rows (their own generators) alike."""
    draws = 40_000
    sampler = Sampler(seed=0, device=torch.device("cpu"))
    logits = PROBS.log().repeat(draws, 1)
    shared = torch.tensor(sampler(logits, [params] * draws, [None] * draws))
    seeded = torch.tensor(sampler(logits[:4000], [params] * 4000,
                                  [sampler.request_generator(i) for i in range(4000)]))
    for tokens, tolerance in ((shared, 0.01), (seeded, 0.03)):
        frequencies = torch.bincount(tokens, minlength=4).double() / len(tokens)
        assert (frequencies - expected.double()).abs().max() < tolerance, frequencies
        assert all(frequencies[i] == 0 for i in range(4) if expected[i] == 0)


TIED = torch.tensor([0.4, 0.3, 0.3])


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0, top_p=0.5),  # 0.4 before the tie's 0.3s
                                    SamplingParams(temperature=1.0, top_k=2)])
def test_tokens_of_equal_probability_at_a_filters_edge_stay_together(params):
    """The filters keep or drop a tie whole (vLLM's top-k keeps ties too): which of two equally
    likely tokens stays must not depend on how a sort happened to order them."""
    sampler = Sampler(seed=0, device=torch.device("cpu"))
    logits = TIED.log().repeat(600, 1)
    assert set(sampler(logits, [params] * 600, [None] * 600)) == {0, 1, 2}


def test_top_p_draws_follow_the_renormalised_nucleus():
    draws = 40_000
    sampler = Sampler(seed=0, device=torch.device("cpu"))
    tokens = torch.tensor(sampler(PROBS.log().repeat(draws, 1), [SamplingParams(top_p=0.85)] * draws,
                                  [None] * draws))
    frequencies = torch.bincount(tokens, minlength=4).double() / draws
    expected = torch.tensor([0.5, 0.3, 0.15, 0.0], dtype=torch.float64) / 0.95
    assert (frequencies - expected).abs().max() < 0.01, frequencies


def test_filters_never_sort_the_vocabulary_on_cpu(monkeypatch):
    """A sort of the whole row took ~1.7 ms a row of 49,152 tokens: top-k takes ``topk``, top-p the
    nucleus kernel, min-p a comparison."""
    if not cpu_kernels.takes_nucleus(torch.zeros(1, 4)):
        pytest.skip(cpu_kernels.why_off())
    monkeypatch.setattr(torch.Tensor, "sort", lambda *a, **k: pytest.fail("the sampler sorted a row"))
    sampler = Sampler(seed=0, device=torch.device("cpu"))
    params = [SamplingParams(top_p=0.9), SamplingParams(top_k=20, top_p=0.8), SamplingParams(min_p=0.1),
              SamplingParams(temperature=0), SamplingParams(temperature=0.7)]
    tokens = sampler(torch.randn(5, 49152) * 4, params, [None] * 5)
    assert len(tokens) == 5


def test_the_sort_where_the_nucleus_kernel_is_not_draws_the_same_tokens(monkeypatch):
    """Off the CPU (or without a compiler) top-p's threshold comes from a sort of the whole row: the
    same tokens from the same draws."""
    logits = torch.randn(64, 3000, generator=torch.Generator().manual_seed(2)) * 3
    params = [SamplingParams(temperature=0.8, top_p=p, top_k=k) for p in (0.5, 0.9, 0.99) for k in (0, 40)] * 10 + \
        [SamplingParams(top_p=0.95, min_p=0.05)] * 4
    kernel = Sampler(seed=0, device=torch.device("cpu"))(logits, params, [None] * 64)
    monkeypatch.setattr(cpu_kernels, "takes_nucleus", lambda probs: False)
    assert Sampler(seed=0, device=torch.device("cpu"))(logits, params, [None] * 64) == kernel


def test_mixed_rows_each_follow_their_own_params():
    sampler = Sampler(seed=0, device=torch.device("cpu"))
    logits = PROBS.log().repeat(300, 1)
    params = [SamplingParams(temperature=0), SamplingParams(top_k=2), SamplingParams(top_k=3)] * 100
    tokens = sampler(logits, params, [None] * 300)
    assert set(tokens[0::3]) == {0} and set(tokens[1::3]) <= {0, 1} and set(tokens[2::3]) == {0, 1, 2}


def spread_logits(rows: int, vocab: int = 3000) -> torch.Tensor:
    """Logits over a vocabulary of several cumulative-sum blocks (3,000: three of 1,000), with
    tokens of weight 0 (-inf) at the blocks' edges and a whole block of them on some rows."""
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1)) * 4
    width = cdf_block(vocab)
    logits[:, width - 1::width] = float("-inf")
    logits[:, :width:7] = float("-inf")
    logits[::3, width:2 * width] = float("-inf")
    return logits


def test_two_level_draws_pick_the_token_a_whole_fp64_cumulative_sum_picks():
    """The same uniform draws through one whole fp64 cumulative sum of the same weights: the
    same tokens, row for row; no token of weight 0 ever."""
    rows = 3000
    logits = spread_logits(rows)
    tokens = torch.tensor(Sampler(seed=0, device=torch.device("cpu"))(
        logits, [SamplingParams(temperature=1.0)] * rows, [None] * rows))
    weights = (logits - logits.amax(dim=-1, keepdim=True)).exp()
    cdf = weights.double().cumsum(dim=-1)
    draws = torch.rand(rows, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None], right=True)[:, 0]
    assert cdf_block(3000) == 1000
    assert torch.equal(tokens, expected)
    assert bool((weights.gather(1, tokens[:, None]) > 0).all())


@pytest.mark.parametrize("draw", [0.0, 1.0 - 2.0 ** -53])
def test_the_extreme_draws_pick_the_first_and_last_token_of_weight(monkeypatch, draw):
    """A draw of 0 takes the row's first token of weight > 0; the largest draw below 1 a token of
    weight > 0 with at most 1e-6 of the row's weight after it, even where the last block's fp32
    sum rounds above or below what its tokens add up to in fp64."""
    rows = 200
    logits = spread_logits(rows)
    monkeypatch.setattr(Sampler, "_draws", lambda self, generators, device: torch.full((len(generators),), draw,
                                                                                     dtype=torch.float64))
    tokens = Sampler(seed=0, device=torch.device("cpu"))(logits, [SamplingParams(temperature=1.0)] * rows,
                                                         [None] * rows)
    weights = (logits - logits.amax(dim=-1, keepdim=True)).exp().double()
    for row, token in enumerate(tokens):
        assert weights[row, token] > 0
        if draw == 0:
            assert token == int(weights[row].nonzero()[0, 0])
        else:
            assert weights[row, token + 1:].sum() <= 1e-6 * weights[row].sum()


def test_seeded_sampling_is_reproducible_whatever_the_batch(tiny_model_dir):
    llm = LLM(tiny_model_dir, max_num_batched_tokens=32)
    seeded = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, seed=1234, ignore_eos=True)
    alone = llm.generate([[11, 12, 13]], seeded)[0].token_ids
    crowd = llm.generate([[40, 41], [11, 12, 13], list(range(300, 380))],
                         [SamplingParams(max_tokens=12, temperature=1.0), seeded, SamplingParams(max_tokens=5)])
    assert crowd[1].token_ids == alone
    other_seed = llm.generate([[11, 12, 13]], SamplingParams(max_tokens=12, temperature=1.0, seed=99,
                                                               ignore_eos=True))[0].token_ids
    assert other_seed != alone


class _CharTokenizer:
    """Token i is byte i of UTF-8 text; decoding shows incomplete characters as U+FFFD."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


def stream(text: str, stop: list[str]) -> tuple[str, str, bool]:
    detok = IncrementalDetokenizer(_CharTokenizer(), stop)
    deltas = [detok.add_token(b) for b in text.encode()]
    deltas.append(detok.finish())
    assert all("\ufffd" not in d for d in deltas)
    return "".join(deltas), detok.text, detok.stopped


def test_streamed_deltas_never_split_multibyte_characters():
    joined, final, stopped = stream("héllo 🌍 wörld ✓", [])
    assert joined == final == "héllo 🌍 wörld ✓" and not stopped


@pytest.mark.parametrize("text, stop, expected", [
    ("one two. three", ["."], "one two"),
    ("abc STOP def", ["STOP", "zzz"], "abc "),
    ("abc ST", ["STOP"], "abc ST"),  # a partial stop at the end is released at finish
    ("🌍 end 🌍 more", ["🌍 more"], "🌍 end "),
])
def test_stop_strings_cut_the_text(text, stop, expected):
    joined, final, stopped = stream(text, stop)
    assert joined == final == expected
    assert stopped == (expected != text)


def test_stop_string_ends_a_real_request(tiny_model_dir):
    llm = LLM(tiny_model_dir)
    free = llm.generate(["Hello"], SamplingParams(max_tokens=20, temperature=0, ignore_eos=True))[0]
    stop = free.text[3:6]
    assert stop.strip(), free.text
    out = llm.generate(["Hello"], SamplingParams(max_tokens=20, temperature=0, stop=[stop]))[0]
    assert out.finish_reason == "stop"
    assert out.text == free.text[: free.text.index(stop)]
