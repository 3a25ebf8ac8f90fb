"""Request: one prompt's state as it moves through waiting -> running -> finished."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from .detokenizer import IncrementalDetokenizer
from .sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """Token ids, progress (``num_computed_tokens``) and KV blocks of one request.

    A step computes ``num_tokens - num_computed_tokens`` pending tokens (or a chunk of them);
    prefill and decode are the same thing seen with different pending counts. After a
    preemption ``num_computed_tokens`` drops to 0 and prompt + output so far are recomputed.
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    detokenizer: IncrementalDetokenizer
    eos_token_ids: frozenset[int]
    arrival_time: float = field(default_factory=time.time)
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    prefill_target: int = 0  # tokens the current (re)prefill must reach; set on admission
    num_cached_tokens: int = 0  # prefix-cache hit of the latest admission
    block_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: str | None = None
    error: str | None = None
    first_token_time: float | None = None
    num_preemptions: int = 0
    generator: object | None = None  # torch.Generator when the request is seeded

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_pending_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed_tokens < self.prefill_target

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def display_status(self) -> str:
        if self.status is RequestStatus.RUNNING:
            return "prefilling" if self.is_prefilling else "decoding"
        return self.status.value

    def token_at(self, index: int) -> int:
        n = len(self.prompt_token_ids)
        return self.prompt_token_ids[index] if index < n else self.output_token_ids[index - n]
