"""What callers get back: streamed deltas while a request runs, one RequestOutput at the end."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """One generated token's log-probabilities, for a request that asked (``logprobs=k``).

    ``logprobs`` maps token id -> log-probability: the top k by rank (best first), then the
    sampled token if it is not among them. ``logits`` holds the raw logits of the same ids (what
    the solo check compares). Both come from the model's raw logits, before temperature and
    filters (``sampler.token_logprobs``).
    """

    logprobs: dict[int, float]
    logits: dict[int, float]


@dataclass(slots=True)
class RequestDelta:
    """New tokens and final text of one request from one step (text never splits a character)."""

    request_id: str
    token_ids: list[int]
    text: str
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None
    logprobs: list[TokenLogprobs] | None = None  # one per token of ``token_ids`` when asked


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None
    arrival_time: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    # One dict per generated token (token id -> logprob: the top k and the sampled token) when
    # the request asked for ``logprobs`` (then it starts as []); else None.
    logprobs: list[dict[int, float]] | None = None

    def add(self, delta: RequestDelta) -> None:
        """Fold one delta in (tokens, text, log-probabilities, how it ended)."""
        self.token_ids.extend(delta.token_ids)
        self.text += delta.text
        if delta.logprobs is not None and self.logprobs is not None:
            self.logprobs.extend(t.logprobs for t in delta.logprobs)
        if delta.finished:
            self.finish_reason, self.error = delta.finish_reason, delta.error

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
