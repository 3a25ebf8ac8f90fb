"""Sampler: one vectorised pass turns the step's logits rows into one token per request.

Greedy rows take the argmax. Other rows are scaled by temperature and filtered by top-k, top-p
and min-p (the probabilities of what they exclude set to 0, only when some row asks for a
filter), then drawn by inverse CDF: one uniform number a row, and the token where the row's
cumulative probability first exceeds it, which is sampling from ``p`` exactly. The exponential
race (``argmax(p / E)``, E ~ Exp(1), vLLM's) draws one random number per vocabulary entry instead:
2.9 million for 60 rows of a 49,152-token vocabulary, the sampler's largest cost on CPU (a third
of a dashboard step with presets at temperature 0.7). A seeded request draws from its own
generator, so its tokens do not depend on what else shares the batch.

The cumulative sum is taken in two levels: the sums of blocks of ~1,000 tokens (fp32, then their
running sum in fp64), then the running sum (fp64) inside the one block the draw falls in. A whole
[rows, vocab] fp64 cumulative sum (16 MB at 40 rows of 49,152) cost 8-14 ms a step on CPU, more
than the rest of the sampler; the two levels read the weights once, and the weights
(``exp(logit - max)``, softmax before its division) are computed in place in the one copy the
temperature makes (a filtered step's: its softmax). The token is the one a whole fp64 sum would
give but where a block's fp32 sum rounds (a shift of about 1e-7 of that block's mass between its
last token and the next block's first), and never one of weight 0.

The filters never sort the vocabulary (torch's sort of 49,152 logits took ~1.7 ms a row on CPU,
39 ms for a 16-row step, three times that step's forward pass). Top-k keeps the tokens at least as
likely as the k-th (``topk``: ties at the k-th all stay, as in vLLM). Top-p keeps a token when the
tokens strictly more likely than it hold less than ``top_p`` of the probability (after top-k), so
tokens of equal probability stay or go together: that is every token at or above a threshold,
found on CPU by ``nucleus.c`` among the few tokens that can be in the nucleus, elsewhere by a
sort (``nucleus_thresholds``, the reference both are tested against). Min-p keeps the tokens of
at least ``min_p`` times the row's largest probability (after top-k).

Log-probabilities (``SamplingParams.logprobs``) are those of the model itself: the log-softmax,
in fp32, of the raw logits the sampler receives, before temperature, top-k, top-p and min-p
(vLLM's default, "raw_logprobs"). So they do not depend on how a request samples, a greedy
request gets the model's true distribution, and the sampled token always has a finite
log-probability even where a filter had cut it. Each row is computed on its own, so a request's
log-probabilities never depend on the other rows of the step.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from . import cpu_kernels
from .outputs import TokenLogprobs
from .sampling_params import SamplingParams


@dataclass(slots=True)
class SampledStep:
    """What one step sampled, per segment: its token (None: a prefill chunk, nothing sampled)
    and its log-probabilities (None unless the request asked)."""

    tokens: list[int | None]
    logprobs: list[TokenLogprobs | None]

    @classmethod
    def empty(cls, num_segments: int) -> SampledStep:
        return cls([None] * num_segments, [None] * num_segments)


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Each row's argmax, the first maximum where several tie: the CPU kernel where it is built
    (3x torch's over 16 rows of a 49,152- or 151,936-token vocabulary), else ``max``'s indices
    (on CPU twice as fast as ``argmax``; the same choice)."""
    if cpu_kernels.takes_argmax(logits):
        return cpu_kernels.argmax_rows(logits)
    return logits.max(dim=-1).indices


class Sampler:
    def __init__(self, seed: int, device: torch.device):
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def request_generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(seed)

    def __call__(
        self,
        logits: torch.Tensor,  # [rows, vocab] float32
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> list[int]:
        random_rows = [i for i, p in enumerate(params) if not p.greedy]
        if len(random_rows) == len(params):
            return self._sample(logits, params, generators).tolist()
        tokens = greedy_tokens(logits)
        if random_rows:
            rows = torch.tensor(random_rows, device=logits.device)
            tokens[rows] = self._sample(logits[rows], [params[i] for i in random_rows],
                                        [generators[i] for i in random_rows])
        return tokens.tolist()

    def _sample(self, logits, params: list[SamplingParams], generators) -> torch.Tensor:
        temperature = torch.tensor([p.temperature for p in params], device=logits.device)
        logits = logits / temperature[:, None]
        if any(p.top_k > 0 or p.top_p < 1 or p.min_p > 0 for p in params):
            weights = filtered_probs(logits, params)
        else:
            weights = logits.sub_(logits.amax(dim=-1, keepdim=True)).exp_()  # p times a row's constant
        return self._inverse_cdf(weights, generators)

    def _inverse_cdf(self, weights: torch.Tensor, generators) -> torch.Tensor:
        """Each row's token: where its cumulative weight first exceeds a uniform draw times the
        row's total, the row's own generator's draw for a seeded request, else the sampler's."""
        rows, vocab = weights.shape
        width = cdf_block(vocab)
        blocks = weights.view(rows, vocab // width, width)
        block_cdf = blocks.sum(dim=-1).double().cumsum(dim=-1)
        target = self._draws(generators, weights.device) * block_cdf[:, -1]
        block = torch.searchsorted(block_cdf, target[:, None], right=True)[:, 0]
        before = torch.where(block > 0, block_cdf.gather(1, (block - 1).clamp(min=0)[:, None])[:, 0], 0.0)
        inside = blocks[torch.arange(rows, device=weights.device), block].cumsum(dim=-1, dtype=torch.float64)
        # The block's own sum may round a hair below its share of block_cdf: stay inside it.
        within = torch.minimum(target - before, torch.nextafter(inside[:, -1], torch.zeros_like(before)))
        return block * width + torch.searchsorted(inside, within[:, None], right=True)[:, 0]

    def _draws(self, generators, device: torch.device) -> torch.Tensor:
        """One uniform number in [0, 1) a row (fp64): a seeded row's from its own generator."""
        draws = torch.empty(len(generators), dtype=torch.float64, device=device)
        shared = [i for i, g in enumerate(generators) if g is None]
        if shared:
            draws[shared] = torch.rand(len(shared), dtype=torch.float64, device=device, generator=self.generator)
        for i, generator in enumerate(generators):
            if generator is not None:
                draws[i] = torch.rand(1, dtype=torch.float64, device=device, generator=generator)
        return draws


def filtered_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Each row's probabilities with the tokens its top-k, top-p and min-p exclude at 0 (the module
    note; ``logits`` are overwritten). Zeroed after the softmax, not set to -inf before an exp: exp
    of -inf is ~30x slower than of a number on CPU (1.5 ms for 16 rows of 49,152)."""
    if any(p.top_k > 0 for p in params):
        logits.masked_fill_(logits < _top_k_floor(logits, params), float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return probs.masked_fill_(probs < _probability_floor(probs, params)[:, None], 0)


def _probability_floor(probs: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Each row's least probability that stays (``[rows]``): min-p's share of its largest, or its
    top-p nucleus's threshold where that is higher."""
    device = probs.device
    floor = torch.tensor([p.min_p for p in params], device=device) * probs.amax(dim=-1)
    nucleus = [i for i, p in enumerate(params) if p.top_p < 1]
    if nucleus:
        index = torch.tensor(nucleus, device=device)
        top_p = torch.tensor([params[i].top_p for i in nucleus], dtype=torch.float64, device=device)
        rows = probs if len(nucleus) == len(params) else probs[index]
        floor[index] = torch.maximum(floor[index], _nucleus_thresholds(rows, top_p))
    return floor


def _top_k_floor(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Each row's k-th largest logit (``[rows, 1]``), -inf for a row without top-k."""
    rows, vocab = logits.shape
    chosen = [i for i, p in enumerate(params) if p.top_k > 0]
    k = torch.tensor([min(params[i].top_k, vocab) for i in chosen], device=logits.device)
    index = torch.tensor(chosen, device=logits.device)
    floor = torch.full((rows, 1), float("-inf"), device=logits.device)
    floor[index] = logits[index].topk(int(k.max()), dim=-1).values.gather(1, k[:, None] - 1)
    return floor


def _nucleus_thresholds(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    if cpu_kernels.takes_nucleus(probs):
        return cpu_kernels.nucleus_thresholds(probs, top_p)
    return nucleus_thresholds(probs, top_p)


def nucleus_thresholds(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Each row's least probability its top-p nucleus keeps (``[rows]``), by a sort of the whole row: the
    last, in descending order, with less than ``top_p`` before it (an exclusive fp64 cumulative sum; a
    tie there has the same value and stays whole); ``nucleus.c`` gives the same without the sort."""
    values = probs.sort(dim=-1, descending=True).values
    before = torch.nn.functional.pad(values.double().cumsum(dim=-1)[:, :-1], (1, 0))
    return values.masked_fill(before >= top_p[:, None], float("inf")).amin(dim=-1)


@functools.cache
def cdf_block(vocab: int) -> int:
    """Tokens per block of the two-level cumulative sum: the largest divisor of ``vocab`` up to
    1,024 (49,152: 1,024; Qwen2.5's 151,936: 128), so the rows split into blocks without a copy."""
    return max(d for d in range(1, min(vocab, 1024) + 1) if vocab % d == 0)


def token_logprobs(logits: torch.Tensor, tokens: list[int], params: list[SamplingParams]) -> list[TokenLogprobs | None]:
    """Each row's top ``logprobs`` and its sampled token's, from its raw ``logits`` row (fp32): one
    log-softmax and one ``topk`` a distinct k over the rows that asked, each row on its own (row by
    row in Python it took 2.1 ms of a 16-row step)."""
    asked = [row for row, p in enumerate(params) if p.logprobs is not None]
    out: list[TokenLogprobs | None] = [None] * len(params)
    if not asked:
        return out
    raw_rows = logits if len(asked) == len(params) else logits[asked]
    logprobs = torch.log_softmax(raw_rows.float(), dim=-1)
    ids = _reported_ids(logprobs, [tokens[row] for row in asked], [params[row].logprobs for row in asked])
    at = (torch.tensor([j for j, row_ids in enumerate(ids) for _ in row_ids], device=logits.device),
          torch.tensor([token for row_ids in ids for token in row_ids], device=logits.device))
    values, raw = logprobs[at].tolist(), raw_rows[at].float().tolist()
    start = 0
    for row, row_ids in zip(asked, ids, strict=True):
        end = start + len(row_ids)
        out[row] = TokenLogprobs(dict(zip(row_ids, values[start:end], strict=True)),
                                 dict(zip(row_ids, raw[start:end], strict=True)))
        start = end
    return out


def _reported_ids(logprobs: torch.Tensor, tokens: list[int], ks: list[int]) -> list[list[int]]:
    """Each row's top-k token ids (best first; a ``topk`` over the rows of each distinct k), then its
    sampled token where it is not among them."""
    ids: list[list[int]] = [[] for _ in ks]
    for k in set(ks) - {0}:
        rows = [j for j, row_k in enumerate(ks) if row_k == k]
        chosen = logprobs if len(rows) == len(ks) else logprobs[rows]
        for j, top in zip(rows, chosen.topk(k, dim=-1).indices.tolist(), strict=True):
            ids[j] = top
    return [row_ids if token in row_ids else [*row_ids, token] for row_ids, token in zip(ids, tokens, strict=True)]
