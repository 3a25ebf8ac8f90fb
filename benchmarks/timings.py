"""What one peer's run of one workload yields: per-request token timestamps (and, for
Batchscope, per-step figures). All times are ``time.perf_counter()`` seconds."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestTiming:
    submit: float  # when the request was handed to the peer (its arrival)
    num_prompt_tokens: int
    token_times: list[float] = field(default_factory=list)  # one per generated token
    token_ids: list[int] = field(default_factory=list)


@dataclass
class StepStat:
    """One Batchscope step: its rows, useful FLOPs, and the engine's own phase timings."""

    num_rows: int
    num_decode_rows: int
    flops: float
    kv_bytes: float  # K/V cache bytes this step's attention reads
    forward_ms: float
    total_ms: float
    wall_ms: float  # around engine.step(), as the caller sees it
    cpu_ms: float  # process CPU time of the step (all threads): robust to a shared machine
    phases_ms: float  # sum of the engine's phases (schedule .. postprocess)


@dataclass
class RunResult:
    requests: list[RequestTiming]  # in workload order
    steps: list[StepStat] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)
