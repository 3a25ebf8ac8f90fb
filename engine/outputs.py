"""What callers get back: streamed deltas while a request runs, one RequestOutput at the end."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestDelta:
    """New tokens and final text of one request from one step (text never splits a character)."""

    request_id: str
    token_ids: list[int]
    text: str
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None


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

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
