"""The solo check: did a finished request come out as it would have alone?

Continuous batching packs a request with whatever else runs at that moment. Unless the kernels
are batch-invariant (``EngineConfig.batch_invariant``), a matmul's or an attention split's
reduction order depends on the batch, so the same request's logits differ in the last bits from
run to run, and a greedy choice at a near-tie can flip ("Defeating nondeterminism in LLM
inference", Thinking Machines, 2025). The check re-runs a finished request's prompt with the same
sampling parameters on the same engine, once it is idle, and compares the two runs token by
token: the tokens, and the log-probabilities both runs report for the same token ids.

It needs the original's log-probabilities: ``RunLog`` keeps those of the last ``capacity``
requests that asked for them (``SamplingParams.logprobs``; the dashboard asks for 0, the sampled
token's own), folded in from the deltas on the engine thread. A sampled request is comparable
only with a seed: its noise then comes from its own generator, whatever else is batched.
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .outputs import RequestDelta, RequestOutput
from .prompts import Prepared
from .sampling_params import SamplingParams

if TYPE_CHECKING:
    from .async_llm import AsyncLLM

IDLE_POLL_S = 0.05
_solo_numbers = itertools.count(1)


@dataclass
class Run:
    """One request as it ran: its prompt, parameters, tokens and per-token log-probabilities."""

    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    finish_reason: str | None = None


class RunLog:
    """The last ``capacity`` requests that asked for log-probabilities (thread-safe)."""

    def __init__(self, capacity: int = 128):
        self.capacity = capacity
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, request_id: str, prepared: Prepared) -> None:
        if prepared.params.logprobs is None:
            return
        with self._lock:
            self._runs[request_id] = Run(tuple(prepared.token_ids), prepared.params)
            while len(self._runs) > self.capacity:
                self._runs.popitem(last=False)

    def take(self, deltas: list[RequestDelta]) -> None:
        """Fold the kept requests' deltas in (engine thread)."""
        with self._lock:
            for delta in deltas:
                run = self._runs.get(delta.request_id)
                if run is not None:
                    run.token_ids.extend(delta.token_ids)
                    run.logprobs.extend(t.logprobs for t in delta.logprobs or ())
                    run.finish_reason = delta.finish_reason if delta.finished else None

    def finished(self, request_id: str) -> Run:
        """A copy of a finished run; LookupError (not kept) or ValueError (not comparable)."""
        with self._lock:
            run = self._runs.get(request_id)
            run = None if run is None else dataclasses.replace(run, token_ids=list(run.token_ids),
                                                               logprobs=list(run.logprobs))
        if run is None:
            raise LookupError(f"request {request_id!r}: not among the last {self.capacity} requests "
                              f"that kept their log-probabilities")
        if run.finish_reason is None:
            raise ValueError(f"request {request_id!r} has not finished yet")
        if run.finish_reason in ("abort", "error"):
            raise ValueError(f"request {request_id!r} ended by {run.finish_reason}: nothing to compare")
        return run


@dataclass(frozen=True)
class Difference:
    """Where two runs of one request part: the first token whose token or log-probabilities
    differ, the first whose token differs, and the largest |logprob difference| up to there."""

    first_difference: int | None
    tokens_diverge_at: int | None
    max_abs_difference: float
    num_compared: int


def compare(original: Run, solo: RequestOutput) -> Difference:
    """Token by token, while both runs have the same tokens so far (after that the contexts differ)."""
    first, biggest, length = None, 0.0, min(len(original.token_ids), len(solo.token_ids))
    for k in range(length):
        mine, alone = original.logprobs[k], solo.logprobs[k]
        gap = max((abs(mine[i] - alone[i]) for i in mine.keys() & alone.keys()), default=0.0)
        biggest = max(biggest, gap)
        if first is None and (gap > 0 or original.token_ids[k] != solo.token_ids[k]):
            first = k
        if original.token_ids[k] != solo.token_ids[k]:
            return Difference(first, k, biggest, k + 1)
    if len(original.token_ids) != len(solo.token_ids):
        return Difference(length if first is None else first, length, biggest, length)
    return Difference(first, None, biggest, length)


@dataclass(frozen=True)
class SoloReport:
    request_id: str
    solo_request_id: str
    difference: Difference
    alone: bool  # no other request shared a step with the solo run
    batch_invariant: bool  # the engine's EngineConfig.batch_invariant

    @property
    def same(self) -> bool:
        return self.difference.first_difference is None

    @property
    def summary(self) -> str:
        d = self.difference
        verdict = "same as alone" if self.same else \
            f"first differs at token {d.first_difference}, max |logprob difference| {d.max_abs_difference:.3g}"
        return f"{verdict} (batch invariance {'on' if self.batch_invariant else 'off'})"

    def to_dict(self) -> dict:
        return {"request_id": self.request_id, "solo_request_id": self.solo_request_id, "same": self.same,
                **dataclasses.asdict(self.difference), "alone": self.alone,
                "batch_invariant": self.batch_invariant, "summary": self.summary}


def solo_params(params: SamplingParams) -> SamplingParams:
    """The original's parameters, with log-probabilities; ValueError when a re-run cannot match."""
    if not params.greedy and params.seed is None:
        raise ValueError(f"the solo check needs a greedy or seeded request; this one sampled at "
                         f"temperature {params.temperature} without a seed")
    return dataclasses.replace(params, logprobs=params.logprobs or 0)


class SoloChecker:
    """Runs solo checks on one engine, one at a time (two at once would batch together)."""

    def __init__(self, llm: AsyncLLM, runs: RunLog):
        self._llm = weakref.ref(llm)  # the engine owns its checker: no cycle keeps a shut-down engine's weights
        self.runs = runs
        self._lock = threading.Lock()

    @property
    def llm(self) -> AsyncLLM:
        llm = self._llm()
        if llm is None:
            raise RuntimeError("the engine is gone")
        return llm

    def check(self, request_id: str, solo_request_id: str | None = None, timeout: float = 120.0) -> SoloReport:
        run = self.runs.finished(request_id)
        params = solo_params(run.params)
        solo_id = solo_request_id or f"{request_id}-solo{next(_solo_numbers)}"
        with self._lock:
            deadline = time.monotonic() + timeout
            self._wait_idle(deadline)
            output, alone = self._run_alone(run, params, solo_id, deadline)
        return SoloReport(request_id, solo_id, compare(run, output), alone,
                          self.llm.config.batch_invariant)

    def _wait_idle(self, deadline: float) -> None:
        while any(self.llm.counts().values()):
            if self.llm.paused:
                raise ValueError("the engine is paused with requests in it: resume it to run the solo check")
            if time.monotonic() > deadline:
                raise TimeoutError("the engine stayed busy; run the solo check when it is idle")
            time.sleep(IDLE_POLL_S)

    def _run_alone(self, run: Run, params: SamplingParams, solo_id: str,
                   deadline: float) -> tuple[RequestOutput, bool]:
        """The solo run's output, and whether every step it was in held it alone."""
        crowded = []

        def on_record(record: dict) -> None:
            ids = {s["request_id"] for s in record["segments"]}
            if solo_id in ids and len(ids) > 1:
                crowded.append(record["step"])

        unsubscribe = self.llm.subscribe(on_record)
        try:
            stream = self.llm.add_request(self.llm.prepare(list(run.prompt_token_ids), params), request_id=solo_id)
            if not self.llm.wait_for([solo_id], {"finished"}, max(0.0, deadline - time.monotonic())):
                self.llm.abort(solo_id)
                raise TimeoutError(f"the solo run {solo_id} did not finish in time")
            output = stream.collect()
        finally:
            unsubscribe()
        if output.finish_reason in ("abort", "error"):
            raise RuntimeError(f"the solo run {solo_id} ended by {output.finish_reason}: {output.error}")
        return output, not crowded
