"""The tap on vLLM's scheduler: reads every engine step into a Batchscope record.

vLLM's engine core runs one loop (``EngineCore.step``): ``scheduler.schedule()`` -> the
executor runs the model on the workers -> ``scheduler.update_from_output(scheduler_output,
model_runner_output)``. With tensor or pipeline parallelism the workers are separate processes,
but the scheduler runs once, in the engine-core process, so one tap there sees every step.

``SchedulerTap.install`` wraps those two methods (and ``finish_requests``, through which
aborts arrive between steps) on the scheduler *instance*, so a subclass (AsyncScheduler, a
``--scheduler-cls``) keeps its own behaviour underneath. Each wrapper calls vLLM first and then
reads what it needs; a failure inside the tap is logged once and switches the tap off, never
vLLM. With a batch queue (pipeline parallel, async scheduling) ``schedule()`` may run again
before the previous step's ``update_from_output()``; steps are matched by their
``SchedulerOutput`` object, in order.

Timing (``durations_ms``): schedule = the ``schedule()`` call; execute = from the end of this
tap's read-out after ``schedule()`` to the call of ``update_from_output()`` (model forward and
sampling on the workers, their output coming back); update = ``update_from_output()``; total =
from the call of ``schedule()`` to the end of ``update_from_output()`` (it includes the tap's own
read-out). Pure record layout lives in ``records.py``.
"""
from __future__ import annotations

import logging
import os
import platform
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vllm.v1.request import RequestStatus

from .records import (
    MAX_SHIPPED_BLOCKS,
    PHASES,
    Admission,
    EngineSettings,
    KVSnapshot,
    LiveRequest,
    OwnerTracker,
    RecordBuilder,
    ScheduledStep,
    StepOutcome,
)

log = logging.getLogger("vllm.batchscope")  # under vLLM's logger: its handler and format


@dataclass(slots=True)
class _Pending:
    output: object  # the SchedulerOutput this step was scheduled as
    step: ScheduledStep
    requests: dict  # request id -> vLLM Request, alive past their finish
    ready: float  # perf_counter when the tap's read-out after schedule() ended


class SchedulerTap:
    def __init__(self, scheduler, sink: Callable[[dict], None]) -> None:
        self.scheduler = scheduler
        self.sink = sink
        self.builder = RecordBuilder(engine_settings(scheduler))
        self._pool = scheduler.kv_cache_manager.block_pool
        self._group = _block_table_group(scheduler)
        self._block_size = self._group.kv_cache_spec.block_size
        self._owners = OwnerTracker(self._pool.num_gpu_blocks)
        self._pending: deque[_Pending] = deque()
        self._aborted: dict[str, tuple[str, LiveRequest]] = {}
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

    # ---- schedule() ------------------------------------------------------------------------
    def _on_schedule(self, output, t_start: float, t0: float) -> None:
        schedule_ms = (time.perf_counter() - t0) * 1e3
        live = self.scheduler.requests
        requests = {rid: live[rid] for rid in output.num_scheduled_tokens}
        num_computed, admitted = _computed_and_admitted(output, requests)
        step = ScheduledStep(
            t_start=t_start,
            schedule_ms=schedule_ms,
            num_scheduled=dict(output.num_scheduled_tokens),
            num_computed=num_computed,
            num_prompt_tokens={rid: r.num_prompt_tokens for rid, r in requests.items()},
            block_tables={rid: self._table(rid) for rid in requests},
            kv=self._kv_snapshot(),
            admitted=admitted,
            preempted=list(output.preempted_req_ids or ()),
        )
        self._pending.append(_Pending(output, step, requests, time.perf_counter()))

    def _table(self, request_id: str) -> list[int]:
        return [block.block_id for block in self._group.req_to_blocks.get(request_id, ())]

    def _kv_snapshot(self) -> KVSnapshot:
        pool = self._pool
        num_blocks, num_free = pool.num_gpu_blocks, pool.get_num_free_blocks()
        if num_blocks > MAX_SHIPPED_BLOCKS:
            return KVSnapshot(num_blocks, self._block_size, num_free,
                              len(pool.cached_block_hash_to_block), None, None, None)
        ref_counts = [block.ref_cnt for block in pool.blocks]
        ref_counts[pool.null_block.block_id] = 1  # vLLM's placeholder block, never handed out
        cached = [block.block_id for block in pool.blocks if block.block_hash is not None]
        owners = self._owners.update(self._holders())
        return KVSnapshot(num_blocks, self._block_size, num_free, len(cached), ref_counts,
                          owners, cached)

    def _holders(self) -> Iterable[tuple[str, list[int]]]:
        for rid, blocks in self._group.req_to_blocks.items():
            yield rid, [block.block_id for block in blocks if not block.is_null]

    # ---- update_from_output() and aborts ---------------------------------------------------
    def _on_update(self, scheduler_output, model_output, t0: float) -> None:
        update_end = time.perf_counter()
        pending = self._pop_pending(scheduler_output)
        if pending is None:
            return
        done = {rid: r for rid, r in pending.requests.items() if r.is_finished()}
        finished = {rid: _finish_reason(r) for rid, r in done.items()}
        states = {rid: _live(r) for rid, r in done.items()}
        states.update((rid, _live(r)) for rid, r in self.scheduler.requests.items())
        aborted, self._aborted = self._aborted, {}
        for rid, (reason, state) in aborted.items():
            finished[rid], states[rid] = reason, state
        num_running, num_waiting = self.scheduler.get_request_counts()
        outcome = StepOutcome(
            t_end=time.time(),
            execute_ms=(t0 - pending.ready) * 1e3,
            update_ms=(update_end - t0) * 1e3,
            row_order=getattr(model_output, "req_ids", None),
            sampled=_sampled(model_output, pending.step.num_scheduled),
            finished=finished,
            aborted=list(aborted),
            requests=states,
            num_waiting=num_waiting,
            num_running=num_running,
        )
        self.sink(self.builder.build(pending.step, outcome))

    def _pop_pending(self, scheduler_output) -> _Pending | None:
        while self._pending:
            pending = self._pending.popleft()
            if pending.output is scheduler_output:
                return pending
        log.debug("Batchscope tap: update_from_output for a step it did not see scheduled")
        return None

    def _on_finish(self, requests) -> None:
        for request in requests or ():
            self._aborted[request.request_id] = (_finish_reason(request), _live(request))


def _block_table_group(scheduler):
    """The KV cache group whose block tables the records show: the first (the only one for
    models with one attention type)."""
    return scheduler.kv_cache_manager.coordinator.single_type_managers[0]


def _computed_and_admitted(output, requests: dict) -> tuple[dict[str, int], dict[str, Admission]]:
    """Tokens in the KV cache before the step, per scheduled request, and the requests
    (re)admitted this step with their prefix-cache hit and prefill target."""
    num_computed: dict[str, int] = {}
    admitted: dict[str, Admission] = {}
    for new in output.scheduled_new_reqs:
        num_computed[new.req_id] = new.num_computed_tokens
        admitted[new.req_id] = Admission(new.num_computed_tokens, requests[new.req_id].num_tokens)
    cached = output.scheduled_cached_reqs
    num_computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
    for rid in cached.resumed_req_ids:
        admitted[rid] = Admission(num_computed[rid], requests[rid].num_tokens)
    return num_computed, admitted


def _sampled(model_output, scheduled: dict[str, int]) -> dict[str, int]:
    index = getattr(model_output, "req_id_to_index", None) or {}
    tokens = getattr(model_output, "sampled_token_ids", None) or []
    sampled = {}
    for rid in scheduled:
        i = index.get(rid)
        if i is not None and i < len(tokens) and len(tokens[i]) > 0:
            sampled[rid] = int(tokens[i][-1])
    return sampled


def _live(request) -> LiveRequest:
    if request.is_finished():
        status = "finished"
    elif request.status == RequestStatus.RUNNING:
        status = "running"
    elif request.status == RequestStatus.PREEMPTED:
        status = "preempted"
    else:
        status = "waiting"
    return LiveRequest(status, request.num_prompt_tokens, request.num_computed_tokens,
                       request.num_output_tokens)


def _finish_reason(request) -> str:
    reason = request.get_finished_reason()
    return str(reason) if reason is not None else "stop"


# ---- what the engine is ------------------------------------------------------------------
def engine_settings(scheduler) -> EngineSettings:
    import vllm

    config = scheduler.vllm_config.scheduler_config
    return EngineSettings(
        version=vllm.__version__,
        policy=f"vllm-{scheduler.policy.value}",
        token_budget=int(scheduler.max_num_scheduled_tokens),
        chunked_prefill=bool(config.enable_chunked_prefill),
    )


def source_info(scheduler) -> dict:
    """The hello's ``info``: Batchscope's SourceInfo fields, with the trace header."""
    config = scheduler.vllm_config
    model = config.model_config
    pool = scheduler.kv_cache_manager.block_pool
    block_size = _block_table_group(scheduler).kv_cache_spec.block_size
    name = model.served_model_name
    name = name[0] if isinstance(name, (list, tuple)) else name
    parallel = config.parallel_config
    engine = {
        "policy": engine_settings(scheduler).policy,
        "max_num_batched_tokens": int(scheduler.max_num_scheduled_tokens),
        "enable_chunked_prefill": bool(config.scheduler_config.enable_chunked_prefill),
        "enable_prefix_caching": bool(config.cache_config.enable_prefix_caching),
        "num_kv_blocks": pool.num_gpu_blocks,
        "block_size": block_size,
        "max_num_seqs": config.scheduler_config.max_num_seqs,
        "max_model_len": model.max_model_len,
        "dtype": str(model.dtype).removeprefix("torch."),
        "tensor_parallel_size": parallel.tensor_parallel_size,
        "pipeline_parallel_size": parallel.pipeline_parallel_size,
        "data_parallel_size": parallel.data_parallel_size,
        "data_parallel_rank": parallel.data_parallel_rank,
        "distributed_executor_backend": str(parallel.distributed_executor_backend),
    }
    return {
        "model": str(name),
        "block_size": block_size,
        "num_kv_blocks": pool.num_gpu_blocks,
        "max_model_len": model.max_model_len,
        "phases": list(PHASES),
        "trace_header": {
            "model": {"name": str(name), "config": _hf_config(model)},
            "engine": engine,
            "hardware": _hardware(config.device_config.device_type),
        },
    }


def _hf_config(model_config) -> dict:
    hf_config = getattr(model_config, "hf_config", None)
    return hf_config.to_dict() if hasattr(hf_config, "to_dict") else {}


def _hardware(device: str) -> dict:
    import torch

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "device": device,
        "torch": torch.__version__,
        "gpu": _gpu_name() if device == "cuda" else None,
    }


def _gpu_name() -> str | None:
    """The first visible GPU's name, read through NVML by vLLM's platform (no CUDA context in
    the engine-core process)."""
    try:
        from vllm.platforms import current_platform

        return current_platform.get_device_name(0)
    except Exception:  # noqa: BLE001 (a name is nice to have; never fail the engine for it)
        return None
