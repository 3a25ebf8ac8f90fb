"""The tap on vLLM's scheduler: reads every engine step into a Batchscope record.

vLLM's engine core runs one loop: ``scheduler.schedule()`` -> the executor runs the model on the
workers -> ``scheduler.update_from_output(scheduler_output, model_runner_output)``. With tensor or
pipeline parallelism the workers are separate processes, but the scheduler runs once per engine
core, so one tap there sees every step of that core (one core per data-parallel rank).

``SchedulerTap.install`` wraps those two methods (and ``finish_requests``, through which aborts
arrive) on the scheduler *instance*, so a subclass (AsyncScheduler, a ``--scheduler-cls``) keeps
its own behaviour underneath. Each wrapper calls vLLM first and then reads what it needs through
the release's adapter (adapters/); a failure inside the tap is logged once and switches the tap
off, never vLLM.

Async scheduling (CUDA's default) and pipeline parallelism keep several steps in flight:
``schedule()`` of step N+1 runs before ``update_from_output()`` of step N. Each schedule is paired
with its update by the ``SchedulerOutput`` object itself (a FIFO of pending steps), never by
alternation. What the record says of a step is fixed at the moment it is true: the scheduled
tokens, block tables, pool and each request's queue state and computed tokens when its
``schedule()`` returned; outputs and finishes when its ``update_from_output()`` returned. A
request reported finished is reported once; if vLLM had already scheduled it again (it finished or
was aborted while the step was in flight), that step's segment is marked ``discarded``: its rows
ran and vLLM dropped what they sampled.

Timing (``durations_ms``): schedule = the ``schedule()`` call; execute = the time the engine core
waited for this step's output: from the end of the tap's read-out after ``schedule()`` (or the end
of the previous ``update_from_output()``, whichever is later) to the call of
``update_from_output()``; update = ``update_from_output()``; total = from the call of
``schedule()`` to the end of ``update_from_output()``. Without steps in flight execute is the
step's forward and sampling on the workers; with them, consecutive steps' totals overlap
(``source.scheduling`` says "async") and execute is what the forward did not hide.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .records import LiveRequest, RecordBuilder, ScheduledStep, StepOutcome

log = logging.getLogger("vllm.batchscope")  # under vLLM's logger: its handler and format


@dataclass(slots=True)
class _Pending:
    output: object  # the SchedulerOutput this step was scheduled as
    step: ScheduledStep
    requests: dict  # request id -> vLLM Request, every request the scheduler held then
    states: dict[str, LiveRequest]  # their queue state and computed tokens then
    ready: float  # perf_counter when the tap's read-out after schedule() ended


class SchedulerTap:
    def __init__(self, scheduler, sink: Callable[[dict], None], adapter) -> None:
        self.scheduler = scheduler
        self.sink = sink
        self.adapter = adapter
        self.builder = RecordBuilder(adapter.settings())
        self._pending: deque[_Pending] = deque()
        self._aborted: dict[str, tuple[str, LiveRequest]] = {}  # since the last update
        self._reported: set[str] = set()  # finished requests some record already reported
        self._last_update_end = 0.0
        self.enabled = True

    def install(self) -> None:
        sched = self.scheduler
        schedule, update, finish = sched.schedule, sched.update_from_output, sched.finish_requests

        def tapped_schedule(*args, **kwargs):
            t_start, t0 = time.time(), time.perf_counter()
            output = schedule(*args, **kwargs)
            self._guard(self._on_schedule, output, t_start, t0)
            return output

        def tapped_update(scheduler_output, model_runner_output, *args, **kwargs):
            t0 = time.perf_counter()
            result = update(scheduler_output, model_runner_output, *args, **kwargs)
            self._guard(self._on_update, scheduler_output, model_runner_output, t0)
            return result

        def tapped_finish(request_ids, finished_status, *args, **kwargs):
            finished = finish(request_ids, finished_status, *args, **kwargs)
            self._guard(self._on_finish, finished)
            return finished

        sched.schedule, sched.update_from_output = tapped_schedule, tapped_update
        sched.finish_requests = tapped_finish

    def _guard(self, handler, *args) -> None:
        if not self.enabled:
            return
        try:
            handler(*args)
        except Exception:
            self.enabled = False
            log.exception("Batchscope tap failed and is now off; vLLM keeps serving")

    # ---- schedule() ----------------------------------------------------------------------------
    def _on_schedule(self, output, t_start: float, t0: float) -> None:
        schedule_ms = (time.perf_counter() - t0) * 1e3
        adapter = self.adapter
        live = dict(adapter.live_requests())
        num_scheduled = adapter.num_scheduled(output)
        scheduled = {rid: live[rid] for rid in num_scheduled}
        num_computed, admitted = adapter.computed_and_admitted(output, scheduled)
        step = ScheduledStep(
            t_start=t_start,
            schedule_ms=schedule_ms,
            num_scheduled=num_scheduled,
            num_computed=num_computed,
            num_prompt_tokens={rid: r.num_prompt_tokens for rid, r in scheduled.items()},
            block_tables={rid: adapter.block_table(rid) for rid in scheduled},
            kv=adapter.pool_snapshot(),
            admitted=admitted,
            preempted=adapter.preempted(output),
        )
        states = {rid: adapter.live(r) for rid, r in live.items()}
        self._pending.append(_Pending(output, step, live, states, time.perf_counter()))

    # ---- update_from_output() and aborts -------------------------------------------------------
    def _on_update(self, scheduler_output, model_output, t0: float) -> None:
        update_end = time.perf_counter()
        pending = self._pop_pending(scheduler_output)
        if pending is None:
            return
        discarded = frozenset(rid for rid in pending.step.num_scheduled
                              if rid in self._reported or rid in self._aborted)
        finished, states = self._finished_since(pending)
        aborted = self._take_aborted(finished, states)
        scheduled = [rid for rid in pending.step.num_scheduled if rid not in discarded]
        outcome = StepOutcome(
            t_end=time.time(),
            execute_ms=(t0 - max(pending.ready, self._last_update_end)) * 1e3,
            update_ms=(update_end - t0) * 1e3,
            row_order=self.adapter.row_order(model_output),
            sampled=self.adapter.sampled(model_output, scheduled),
            finished=finished,
            aborted=aborted,
            requests=states,
            discarded=discarded,
        )
        self._last_update_end = time.perf_counter()
        self._forget_reported()
        self.sink(self.builder.build(pending.step, outcome))

    def _finished_since(self, pending: _Pending) -> tuple[dict[str, str], dict[str, LiveRequest]]:
        """Requests of this step that finished and no record reported yet, with every request's
        state as of this step (outputs counted now)."""
        adapter, finished, states = self.adapter, {}, {}
        for rid, request in pending.requests.items():
            done = adapter.is_finished(request)
            if done and rid in self._reported:
                continue
            state = pending.states[rid]
            states[rid] = LiveRequest("finished" if done else state.status, state.num_prompt_tokens,
                                      state.num_computed_tokens, request.num_output_tokens)
            if done:
                finished[rid] = adapter.finish_reason(request)
                self._reported.add(rid)
        return finished, states

    def _take_aborted(self, finished: dict[str, str], states: dict[str, LiveRequest]) -> list[str]:
        """Requests finished through ``finish_requests`` since the last update, added to this
        step's ``finished`` and ``states``."""
        aborted, self._aborted = self._aborted, {}
        for rid, (reason, state) in aborted.items():
            finished[rid], states[rid] = reason, state
            self._reported.add(rid)
        return list(aborted)

    def _forget_reported(self) -> None:
        """Keep a reported finish only while a pending step still holds that request."""
        self._reported = {rid for rid in self._reported
                          if any(rid in pending.requests for pending in self._pending)}

    def _pop_pending(self, scheduler_output) -> _Pending | None:
        while self._pending:
            pending = self._pending.popleft()
            if pending.output is scheduler_output:
                return pending
        log.debug("Batchscope tap: update_from_output for a step it did not see scheduled")
        return None

    def _on_finish(self, requests) -> None:
        adapter = self.adapter
        for request in requests or ():
            self._aborted[adapter.request_id(request)] = (adapter.finish_reason(request),
                                                          adapter.live(request))
