"""What the tap reads from a vLLM scheduler, as of vLLM 0.30 (the oldest supported release).

Every read of a vLLM object goes through one of these methods, grouped as the record needs them:
scheduled tokens per request, block tables, the pool snapshot, finished and aborted requests,
the packed row order, the engine's settings. A later release's adapter (``vX_Y.py``) subclasses
the one before it and overrides what that release changed.

vLLM internals read here (0.30-0.33 unless a release's adapter says otherwise):

- ``Scheduler``: ``requests``, ``policy``, ``max_num_scheduled_tokens``, ``vllm_config``
  (``scheduler_config.enable_chunked_prefill`` / ``async_scheduling`` / ``max_num_seqs``,
  ``cache_config.enable_prefix_caching``, ``model_config``, ``parallel_config``,
  ``device_config.device_type``), ``kv_cache_manager.block_pool`` and
  ``kv_cache_manager.coordinator.single_type_managers[0]`` (``req_to_blocks``,
  ``kv_cache_spec.block_size``).
- ``BlockPool``: ``num_gpu_blocks``, ``blocks``, ``null_block``, ``get_num_free_blocks()``,
  ``cached_block_hash_to_block`` (its ``len``); ``KVCacheBlock``: ``block_id``, ``ref_cnt``,
  ``block_hash``, ``is_null``.
- ``SchedulerOutput``: ``num_scheduled_tokens``, ``scheduled_new_reqs`` (``req_id``,
  ``num_computed_tokens``), ``scheduled_cached_reqs`` (``req_ids``, ``num_computed_tokens``,
  ``resumed_req_ids``), ``preempted_req_ids``.
- ``ModelRunnerOutput``: ``req_ids`` (the packed row order), ``req_id_to_index``,
  ``sampled_token_ids``.
- ``Request``: ``request_id``, ``status``, ``is_finished()``, ``get_finished_reason()``,
  ``num_prompt_tokens``, ``num_tokens``, ``num_computed_tokens``, ``num_output_tokens``.
- ``ParallelConfig.data_parallel_index``: the rank of this engine core. vLLM resets
  ``data_parallel_rank`` / ``data_parallel_size`` to 0 / 1 in each engine core of a dense model
  (its ranks run independently), so the index is the one field that still names the rank.
"""
from __future__ import annotations

import os
import platform
from collections.abc import Iterable

from ..records import (
    MAX_SHIPPED_BLOCKS,
    PHASES,
    Admission,
    EngineSettings,
    KVSnapshot,
    LiveRequest,
    OwnerTracker,
)


class SchedulerAdapter:
    RELEASE: tuple[int, int] = (0, 30)

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        self._pool = scheduler.kv_cache_manager.block_pool
        self._group = scheduler.kv_cache_manager.coordinator.single_type_managers[0]
        self.block_size: int = self._group.kv_cache_spec.block_size
        self._owners = OwnerTracker(self._pool.num_gpu_blocks)

    @property
    def release(self) -> str:
        return ".".join(map(str, self.RELEASE))

    # ---- scheduled tokens per request ---------------------------------------------------------
    def live_requests(self) -> dict:
        """request id -> vLLM Request, every request the scheduler holds."""
        return self.scheduler.requests

    def num_scheduled(self, output) -> dict[str, int]:
        return dict(output.num_scheduled_tokens)

    def preempted(self, output) -> list[str]:
        return list(output.preempted_req_ids or ())

    def computed_and_admitted(self, output, requests: dict
                              ) -> tuple[dict[str, int], dict[str, Admission]]:
        """Tokens in the KV cache before the step, per scheduled request, and the requests
        (re)admitted this step with their prefix-cache hit and prefill target."""
        num_computed: dict[str, int] = {}
        admitted: dict[str, Admission] = {}
        for new in output.scheduled_new_reqs:
            num_computed[new.req_id] = new.num_computed_tokens
            admitted[new.req_id] = Admission(new.num_computed_tokens, requests[new.req_id].num_tokens)
        cached = output.scheduled_cached_reqs
        num_computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
        for rid in self.resumed(cached):
            admitted[rid] = Admission(num_computed[rid], requests[rid].num_tokens)
        return num_computed, admitted

    def resumed(self, cached) -> Iterable[str]:
        """Requests of ``scheduled_cached_reqs`` resumed after a preemption."""
        return cached.resumed_req_ids

    # ---- block tables and the pool ------------------------------------------------------------
    def block_table(self, request_id: str) -> list[int]:
        return [block.block_id for block in self._group.req_to_blocks.get(request_id, ())]

    def pool_snapshot(self) -> KVSnapshot:
        pool = self._pool
        num_blocks, num_free = pool.num_gpu_blocks, pool.get_num_free_blocks()
        if num_blocks > MAX_SHIPPED_BLOCKS:
            return KVSnapshot(num_blocks, self.block_size, num_free,
                              len(pool.cached_block_hash_to_block), None, None, None)
        ref_counts = [block.ref_cnt for block in pool.blocks]
        ref_counts[pool.null_block.block_id] = 1  # vLLM's placeholder block, never handed out
        cached = [block.block_id for block in pool.blocks if block.block_hash is not None]
        owners = self._owners.update(self._holders())
        return KVSnapshot(num_blocks, self.block_size, num_free, len(cached), ref_counts,
                          owners, cached)

    def _holders(self) -> Iterable[tuple[str, list[int]]]:
        for rid, blocks in self._group.req_to_blocks.items():
            yield rid, [block.block_id for block in blocks if not block.is_null]

    # ---- requests: state, finish ----------------------------------------------------------------
    def live(self, request) -> LiveRequest:
        return LiveRequest(self.status(request), request.num_prompt_tokens,
                           request.num_computed_tokens, request.num_output_tokens)

    @staticmethod
    def status(request) -> str:
        from vllm.v1.request import RequestStatus

        if request.is_finished():
            return "finished"
        if request.status == RequestStatus.RUNNING:
            return "running"
        if request.status == RequestStatus.PREEMPTED:
            return "preempted"
        return "waiting"

    @staticmethod
    def is_finished(request) -> bool:
        return request.is_finished()

    @staticmethod
    def finish_reason(request) -> str:
        reason = request.get_finished_reason()
        return str(reason) if reason is not None else "stop"

    @staticmethod
    def request_id(request) -> str:
        return request.request_id

    # ---- the model runner's output ------------------------------------------------------------
    @staticmethod
    def row_order(model_output) -> list[str] | None:
        """The runner's batch in packed row order (it may list requests with no rows)."""
        return getattr(model_output, "req_ids", None)

    def sampled(self, model_output, scheduled: Iterable[str]) -> dict[str, int]:
        """The token each scheduled request sampled this step (its last one, with drafts)."""
        index = self.output_index(model_output)
        tokens = getattr(model_output, "sampled_token_ids", None) or []
        sampled = {}
        for rid in scheduled:
            i = index.get(rid)
            if i is not None and i < len(tokens) and len(tokens[i]) > 0:
                sampled[rid] = int(tokens[i][-1])
        return sampled

    @staticmethod
    def output_index(model_output) -> dict[str, int]:
        """request id -> its row in the output's per-request lists."""
        return getattr(model_output, "req_id_to_index", None) or {}

    # ---- the engine ---------------------------------------------------------------------------
    def is_async(self) -> bool:
        """Async scheduling: ``schedule()`` of step N+1 runs before ``update_from_output()`` of N."""
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        config = self.scheduler.vllm_config.scheduler_config
        return isinstance(self.scheduler, AsyncScheduler) or bool(getattr(config, "async_scheduling", False))

    def data_parallel_rank(self) -> int:
        parallel = self.scheduler.vllm_config.parallel_config
        return int(getattr(parallel, "data_parallel_index", parallel.data_parallel_rank) or 0)

    def settings(self) -> EngineSettings:
        import vllm

        sched = self.scheduler
        return EngineSettings(
            version=vllm.__version__,
            policy=f"vllm-{sched.policy.value}",
            token_budget=int(sched.max_num_scheduled_tokens),
            chunked_prefill=bool(sched.vllm_config.scheduler_config.enable_chunked_prefill),
            scheduling="async" if self.is_async() else "sync",
            data_parallel_rank=self.data_parallel_rank(),
            adapter=self.release,
        )

    def source_info(self) -> dict:
        """The hello's ``info``: Batchscope's SourceInfo fields, with the trace header."""
        config = self.scheduler.vllm_config
        model = config.model_config
        name = model.served_model_name
        name = str(name[0] if isinstance(name, (list, tuple)) else name)
        return {
            "model": name,
            "block_size": self.block_size,
            "num_kv_blocks": self._pool.num_gpu_blocks,
            "max_model_len": model.max_model_len,
            "phases": list(PHASES),
            "trace_header": {
                "model": {"name": name, "config": _hf_config(model)},
                "engine": self._engine_header(),
                "hardware": _hardware(config.device_config.device_type),
            },
        }

    def _engine_header(self) -> dict:
        config, settings = self.scheduler.vllm_config, self.settings()
        parallel = config.parallel_config
        return {
            "policy": settings.policy,
            "max_num_batched_tokens": settings.token_budget,
            "enable_chunked_prefill": settings.chunked_prefill,
            "enable_prefix_caching": bool(config.cache_config.enable_prefix_caching),
            "num_kv_blocks": self._pool.num_gpu_blocks,
            "block_size": self.block_size,
            "max_num_seqs": config.scheduler_config.max_num_seqs,
            "max_model_len": config.model_config.max_model_len,
            "dtype": str(config.model_config.dtype).removeprefix("torch."),
            "scheduling": settings.scheduling,
            "tensor_parallel_size": parallel.tensor_parallel_size,
            "pipeline_parallel_size": parallel.pipeline_parallel_size,
            "data_parallel_rank": settings.data_parallel_rank,
            "distributed_executor_backend": str(parallel.distributed_executor_backend),
            "adapter": self.release,
        }


def _hf_config(model_config) -> dict:
    hf_config = getattr(model_config, "hf_config", None)
    config = hf_config.to_dict() if hasattr(hf_config, "to_dict") else {}
    config.pop("_name_or_path", None)  # the server's local directory: traces are shared
    return config


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
