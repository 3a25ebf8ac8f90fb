"""LLMEngine: one step = schedule -> pack -> execute (forward + sample) -> postprocess -> record."""
from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .config import EngineConfig, StepSettings
from .detokenizer import IncrementalDetokenizer
from .loader import load_model
from .model_runner import ModelRunner
from .outputs import RequestDelta
from .packing import PackedStep, pack
from .prompts import Prepared, Preparer, Prompt
from .records import request_states, sampled, segments
from .request import Request
from .sampler import SampledStep
from .sampling_params import SamplingParams
from .scheduler import Scheduler, SchedulerOutput
from .telemetry import BATCHSCOPE_SOURCE, PHASES, IterationRecord
from .timing import PhaseTimer

log = logging.getLogger(__name__)


@dataclass
class StepResult:
    deltas: list[RequestDelta]
    record: IterationRecord


@dataclass
class _Pending:
    """What happened between two steps (aborts, a prefix-cache reset), reported in the next record."""

    aborted: list[Request] = field(default_factory=list)
    finished: dict[str, str] = field(default_factory=dict)
    cache_reset: bool = False


class LLMEngine:
    def __init__(self, model: str = "default", config: EngineConfig | None = None):
        asked = config or EngineConfig()
        asked.validate()
        device_config = asked.for_device()
        dtype = device_config.torch_dtype
        self.loaded = load_model(model, dtype, device_config.device, asked.tokenizer)
        attn = self.loaded.model.layers[0].self_attn
        bytes_per_token = 2 * len(self.loaded.model.layers) * attn.num_kv_heads * attn.head_dim
        # (replaced, never edited: see config.py; reconfigure() swaps in a new one between steps)
        self.config = device_config.for_model(self.loaded.max_positions, bytes_per_token * dtype.itemsize)
        self.model_name = self.loaded.name
        self.tokenizer = self.loaded.tokenizer
        self.vocab_size = self.loaded.config.vocab_size
        self.block_manager = BlockManager(
            self.config.num_kv_blocks, self.config.block_size, self.config.enable_prefix_caching
        )
        self.scheduler = Scheduler(self.block_manager, self.config.max_num_seqs)
        self.runner = ModelRunner(self.loaded, self.config)
        self.preparer = Preparer(self.tokenizer, self.vocab_size, self.config.max_model_len,
                                 self.config.block_size, self.config.num_kv_blocks)
        self.requests: dict[str, Request] = {}
        self.step_index = 0
        self._ids = itertools.count()
        self._pending = _Pending()

    # ---- requests ------------------------------------------------------------------------
    def make_request(self, prompt: Prompt | Prepared, params: SamplingParams | None = None,
                     request_id: str | None = None) -> Request:
        """Validate (unless ``prompt`` is already Prepared) and build a request without
        touching engine state (any thread)."""
        if not isinstance(prompt, Prepared):
            prompt = self.preparer.prepare(prompt, params)
        elif params is not None:
            raise ValueError("sampling_params: a Prepared prompt carries its own")
        params = prompt.params
        request = Request(
            request_id=request_id or f"r{next(self._ids)}",
            prompt_token_ids=list(prompt.token_ids),
            sampling_params=params,
            detokenizer=IncrementalDetokenizer(self.tokenizer, list(params.stop)),
            eos_token_ids=frozenset() if params.ignore_eos else self.loaded.eos_token_ids,
        )
        if params.seed is not None:
            request.generator = self.runner.sampler.request_generator(params.seed)
        return request

    def add(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request_id {request.request_id!r} is already in use")
        self.requests[request.request_id] = request
        self.scheduler.add(request)

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None,
                    request_id: str | None = None) -> Request:
        request = self.make_request(prompt, params, request_id)
        self.add(request)
        return request

    def abort_request(self, request_id: str, reason: str = "abort") -> RequestDelta | None:
        """End a request between steps (``reason`` "abort", or "error" when failing it)."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return None
        self.scheduler.finish(request, reason)
        self._pending.aborted.append(request)
        self._pending.finished[request_id] = reason
        return RequestDelta(request_id, [], request.detokenizer.finish(), True, reason)

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_work

    @property
    def has_unreported_changes(self) -> bool:
        """Aborts or a prefix-cache reset since the last record (an idle engine then runs one
        empty step, so that the viewers see them)."""
        return bool(self._pending.aborted) or self._pending.cache_reset

    def reset_prefix_cache(self) -> int:
        """Forget the prefix cache's blocks no request holds (between steps), so the next
        prompts compute in full as on a fresh engine; how many blocks were freed."""
        freed = self.block_manager.reset_prefix_cache()
        self._pending.cache_reset |= freed > 0
        return freed

    # ---- settings between steps ----------------------------------------------------------
    def reconfigured(self, **changes) -> tuple[EngineConfig, dict[str, tuple]]:
        """The config ``changes`` would give and what they change (ValueError if they cannot
        hold here); nothing is applied."""
        config, changed = self.config.reconfigured(**changes)
        if config.batch_invariant and self.runner.plan.attention != "cpu":
            why = self.runner.attention_fallback
            raise ValueError("batch_invariant needs the CPU kernels; this engine runs attention "
                             f"{self.runner.plan.attention!r}" + (f" ({why})" if why else ""))
        return config, changed

    def reconfigure(self, **changes) -> dict[str, tuple]:
        """Apply ``changes`` from the next step on; what changed, ``{name: (before, after)}``."""
        self.config, changed = self.reconfigured(**changes)
        if changed:
            log.info("reconfigured: %s", ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()))
        return changed

    # ---- the step ------------------------------------------------------------------------
    def step(self) -> StepResult:
        """One iteration: schedule, pack and run the step, then its outputs and its record."""
        t_start = time.time()
        timer = PhaseTimer(cuda=self.runner.device.type == "cuda")
        with timer.phase("schedule"):
            settings = self.config.step_settings  # (this step's: a reconfigure comes between steps)
            sched = self.scheduler.schedule(settings)
        with timer.phase("prepare"):
            packed = pack(sched.scheduled)
        samples, error = self._execute(packed, timer, settings.batch_invariant)
        with timer.phase("postprocess"):
            deltas = self._postprocess(sched, samples, error)
        record = self._record(sched, packed, samples.tokens, timer, t_start, error, settings)
        self.step_index += 1
        return StepResult(deltas, record)

    def _execute(self, packed: PackedStep, timer: PhaseTimer,
                 batch_invariant: bool) -> tuple[SampledStep, str | None]:
        """What each segment sampled, or the error that failed the whole step."""
        if not packed.num_segments:
            return SampledStep.empty(0), None
        try:
            return self.runner.execute(packed, timer, batch_invariant), None
        except Exception as exc:  # one bad step must not kill the engine
            log.exception("step %d failed", self.step_index)
            return SampledStep.empty(packed.num_segments), f"{type(exc).__name__}: {exc}"

    def _postprocess(self, sched: SchedulerOutput, samples: SampledStep, error: str | None) -> list[RequestDelta]:
        deltas = []
        now = time.time()
        for item, token, logprobs in zip(sched.scheduled, samples.tokens, samples.logprobs, strict=True):
            request = item.request
            if error is not None:
                request.error = error
                self._finish(request, "error")
                deltas.append(RequestDelta(request.request_id, [], request.detokenizer.finish(), True, "error", error))
                continue
            request.num_computed_tokens += item.num_new_tokens
            self.block_manager.cache_full_blocks(request)
            if token is None:
                continue
            request.output_token_ids.append(token)
            if request.first_token_time is None:
                request.first_token_time = now
            text = request.detokenizer.add_token(token)
            reason = self._stop_reason(request, token)
            if reason is not None:
                text += request.detokenizer.finish()
                self._finish(request, reason)
            deltas.append(RequestDelta(request.request_id, [token], text, reason is not None, reason,
                                       logprobs=None if logprobs is None else [logprobs]))
        return deltas

    def _stop_reason(self, request: Request, token: int) -> str | None:
        params = request.sampling_params
        if token in request.eos_token_ids or token in params.stop_token_ids:
            return "stop"
        if request.detokenizer.stopped:
            return "stop"
        if len(request.output_token_ids) >= params.max_tokens:
            return "length"
        if request.num_tokens >= self.config.max_model_len:
            return "length"
        return None

    def _finish(self, request: Request, reason: str) -> None:
        self.scheduler.finish(request, reason)
        self.requests.pop(request.request_id, None)
        self._pending.finished[request.request_id] = reason

    def _source(self, batch_invariant: bool) -> dict:
        """The record's ``source``: the engine, and the execution plan this step ran."""
        plan = {**self.runner.plan.to_dict(), "batch_invariant": batch_invariant}
        return {**BATCHSCOPE_SOURCE, "plan": plan}

    def _record(self, sched: SchedulerOutput, packed: PackedStep, tokens: list[int | None],
                timer: PhaseTimer, t_start: float, error: str | None, settings: StepSettings) -> IterationRecord:
        pending, self._pending = self._pending, _Pending()
        ended = pending.aborted + [item.request for item in sched.scheduled if item.request.is_finished]
        durations = timer.durations_ms(PHASES)
        t_end = time.time()
        durations["total"] = round((t_end - t_start) * 1e3, 4)
        return IterationRecord(
            step=self.step_index,
            t_start=t_start,
            t_end=t_end,
            durations_ms=durations,
            policy=settings.policy,
            token_budget=settings.token_budget,
            chunked_prefill=settings.chunked_prefill,
            num_rows=packed.num_rows,
            padded_rows=packed.padded_rows,
            segments=segments(packed, tokens),
            cu_seqlens_q=packed.cu_seqlens_q,
            seq_lens_k=packed.seq_lens_k,
            block_tables=dict(zip(packed.request_ids, packed.block_tables, strict=True)),
            kv=self.block_manager.snapshot(),
            admitted=sched.admitted,
            preempted=sched.preempted,
            finished=pending.finished,
            aborted=[r.request_id for r in pending.aborted],
            sampled=sampled(packed, tokens),
            requests=request_states([*self.requests.values(), *ended]),
            num_waiting=len(self.scheduler.waiting),
            num_running=len(self.scheduler.running),
            source=self._source(settings.batch_invariant),
            error=error,
        )
