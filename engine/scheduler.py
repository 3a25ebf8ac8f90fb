"""Scheduler: which tokens of which requests go into the next forward pass.

Design note. There is no prefill phase and no decode phase (vLLM v1's unified view): each
request has ``num_computed_tokens`` and ``num_tokens`` (prompt + generated), and a step gives
it some of its pending tokens. A decode is simply a request with one pending token; a prompt
is a request with many, which chunked prefill spreads over several steps. Each step fills a
token budget (``max_num_batched_tokens``): running requests first, in arrival order (their
decodes and the next chunk of an unfinished prefill), then waiting requests are admitted while
budget, ``max_num_seqs`` and free KV blocks allow (a prefix-cache hit makes part of a prompt
free). When a running request needs a block and the pool is empty, the newest running
request is preempted by recompute: its blocks are freed, it returns to the front of the
waiting queue and later recomputes prompt + output so far, invisibly to its caller.
``policy="prefill_first"`` is the separated schedule the seed article warns about: a step
holds only prefills while any can be scheduled and only decodes otherwise, so running decodes
stall whenever a prompt arrives.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .config import StepSettings
from .request import Request, RequestStatus


@dataclass(slots=True)
class ScheduledRequest:
    request: Request
    num_new_tokens: int
    kind: str  # "prefill" | "prefill_chunk" | "decode"

    @property
    def completes_prefill(self) -> bool:
        """Whether this step reaches the end of the known tokens, so a token is sampled."""
        return self.request.num_computed_tokens + self.num_new_tokens == self.request.num_tokens


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    admitted: dict[str, int] = field(default_factory=dict)  # request id -> prefix hit tokens
    preempted: list[str] = field(default_factory=list)


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int):
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, settings: StepSettings) -> SchedulerOutput:
        """This step's work under ``settings`` (policy, token budget, chunked prefill)."""
        out = SchedulerOutput()
        budget, chunked = settings.token_budget, settings.chunked_prefill
        if settings.policy == "mixed":
            budget = self._schedule_running(out, budget, phase=None)
            self._admit_waiting(out, budget, chunked)
        else:
            budget = self._schedule_running(out, budget, phase="prefill")
            self._admit_waiting(out, budget, chunked)
            if not out.scheduled:
                self._schedule_running(out, budget, phase="decode")
        # Decodes first, as in the article's [A:1, B:1, C:100]: their rows are contiguous.
        out.scheduled.sort(key=lambda item: item.kind != "decode")
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int, phase: str | None) -> int:
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            if phase is not None and request.is_prefilling != (phase == "prefill"):
                i += 1
                continue
            num_new = min(request.num_pending_tokens, budget)
            if not self._make_room(request, num_new, out):
                break  # the request preempted itself; nothing newer is left to run
            self._add(out, request, num_new)
            budget -= num_new
            i += 1
        return budget

    def _make_room(self, request: Request, num_new: int, out: SchedulerOutput) -> bool:
        """Preempt the newest running requests until ``request`` has its blocks."""
        while not self.block_manager.grow(request, num_new):
            victim = self.running.pop()
            self.preempt(victim)
            out.preempted.append(victim.request_id)
            if victim is request:
                return False
        return True

    def _admit_waiting(self, out: SchedulerOutput, budget: int, chunked: bool) -> None:
        if out.preempted:
            return  # the pool is short this step: do not take in more work
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            hits = self.block_manager.cached_prefix(request)
            num_new = request.num_tokens - len(hits) * self.block_manager.block_size
            if num_new > budget and not chunked:
                break
            num_new = min(num_new, budget)
            if not self.block_manager.admit(request, hits, num_new):
                break
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            request.prefill_target = request.num_tokens
            self.running.append(request)
            out.admitted[request.request_id] = request.num_cached_tokens
            self._add(out, request, num_new)
            budget -= num_new

    @staticmethod
    def _add(out: SchedulerOutput, request: Request, num_new: int) -> None:
        if not request.is_prefilling:
            kind = "decode"
        elif (
            request.num_computed_tokens == request.num_cached_tokens
            and request.num_computed_tokens + num_new >= request.prefill_target
        ):
            kind = "prefill"
        else:
            kind = "prefill_chunk"
        out.scheduled.append(ScheduledRequest(request, num_new, kind))

    def preempt(self, request: Request) -> None:
        self.block_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    def finish(self, request: Request, reason: str) -> None:
        """Take a request out of the queues for good and free its blocks."""
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        elif request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            self.waiting.remove(request)
        self.block_manager.free(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
