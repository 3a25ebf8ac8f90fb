"""The peers: one small class each, with ``setup()`` (load, excluded from timing) and
``run(workload) -> RunResult``. All use greedy decoding, the same token-id prompts and
exactly ``max_tokens`` new tokens per request (EOS ignored)."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import torch

from .arrivals import ArrivalGate
from .roofline import ModelShapes, step_flops, step_kv_bytes
from .timings import RequestTiming, RunResult, StepStat
from .workloads import Workload

now = time.perf_counter


@dataclass
class PeerContext:
    """What every peer of one benchmark run shares."""

    model: str  # "default", an HF directory or a .gguf (as for engine.LLM)
    device: str
    dtype: str  # "float32" | "bfloat16" | "float16"
    token_budget: int
    max_num_seqs: int
    hf_batch_size: int
    kv_cache_memory_gb: float
    max_model_len: int | None = None  # None: the engine's default
    extra_engine_config: dict = field(default_factory=dict)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


class BatchscopePeer:
    """The engine, driven step by step (``LLMEngine``) so requests can arrive mid-run."""

    def __init__(self, ctx: PeerContext, **config):
        self.ctx = ctx
        self.config = dict(
            max_num_batched_tokens=ctx.token_budget, max_num_seqs=ctx.max_num_seqs,
            device=ctx.device, dtype=ctx.dtype, kv_cache_memory_gb=ctx.kv_cache_memory_gb,
            max_model_len=ctx.max_model_len,
        ) | ctx.extra_engine_config | config
        self.subscriber: Callable | None = None  # gets each step's IterationRecord

    def setup(self) -> None:
        from engine import EngineConfig, LLMEngine

        self.engine = LLMEngine(self.ctx.model, EngineConfig.from_kwargs(**self.config))
        self.shapes = ModelShapes.from_config(self.engine.loaded.config)
        self.itemsize = self.engine.config.torch_dtype.itemsize

    def info(self) -> dict:
        return {"engine": "batchscope", "precision": self.engine.config.dtype, "torch": torch.__version__,
                "flags": {k: v for k, v in self.config.items() if v is not None}}

    def run(self, workload: Workload) -> RunResult:
        from engine import SamplingParams
        from engine.telemetry import PHASES

        timings = [RequestTiming(0.0, len(s.prompt)) for s in workload.requests]
        index: dict[str, int] = {}
        gate = ArrivalGate(workload)
        steps: list[StepStat] = []

        def submit(t: float) -> None:
            for i in gate.due([len(x.token_ids) for x in timings]):
                spec = workload.requests[i]
                params = SamplingParams(max_tokens=spec.max_tokens, temperature=0, ignore_eos=True)
                index[self.engine.add_request(spec.prompt, params).request_id] = i
                timings[i].submit = t

        submit(now())
        while self.engine.has_unfinished or not gate.done:
            start, cpu = now(), time.process_time()
            result = self.engine.step()
            end, cpu = now(), time.process_time() - cpu
            for delta in result.deltas:
                timing = timings[index[delta.request_id]]
                timing.token_times += [end] * len(delta.token_ids)
                timing.token_ids += delta.token_ids
            if self.subscriber is not None:
                self.subscriber(result.record)
            steps.append(self._stat(result.record, (end - start) * 1e3, cpu * 1e3, PHASES))
            submit(now())
        return RunResult(timings, steps)

    def _stat(self, record, wall_ms: float, cpu_ms: float, phases) -> StepStat:
        segments = record.segments
        return StepStat(
            num_rows=record.num_rows,
            num_decode_rows=sum(s.num_rows for s in segments if s.kind == "decode"),
            flops=step_flops(self.shapes, segments, len(record.sampled)),
            kv_bytes=step_kv_bytes(self.shapes, segments, self.itemsize),
            forward_ms=record.durations_ms["forward"],
            total_ms=record.durations_ms["total"],
            wall_ms=wall_ms,
            cpu_ms=cpu_ms,
            phases_ms=sum(record.durations_ms[p] for p in phases),
        )


class _HFPeer:
    """Shared loading of the transformers model (sdpa attention, the same weights)."""

    def __init__(self, ctx: PeerContext):
        self.ctx = ctx

    def info(self) -> dict:
        import transformers

        return {"engine": "transformers", "version": transformers.__version__, "precision": self.ctx.dtype}

    def setup(self) -> None:
        from transformers import AutoModelForCausalLM

        from engine.loader import resolve_model_dir

        _, path = resolve_model_dir(self.ctx.model)
        self.model = AutoModelForCausalLM.from_pretrained(
            path, dtype=self.ctx.torch_dtype, attn_implementation="sdpa"
        ).to(self.ctx.device).eval()
        self.pad_id = self.model.config.pad_token_id
        if self.pad_id is None:
            self.pad_id = 0  # any id: padded positions are masked out


class _StepClock:
    """A generate() streamer that only notes when each step's tokens come out."""

    def __init__(self):
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if self._prompt_seen:
            self.times.append(now())
        self._prompt_seen = True

    def end(self) -> None:
        pass


class HFGeneratePeer(_HFPeer):
    """transformers ``generate`` on padded static batches (left padding, explicit mask).

    Requests present at the start are cut into batches of ``hf_batch_size`` in order; a
    request that arrives later (W2) cannot join a running batch, so it waits for the batch
    in flight and then runs in its own. Its arrival time is when the rule says it arrived
    (the earlier requests' token times), so its TTFT includes that wait.
    """

    def run(self, workload: Workload) -> RunResult:
        from transformers import GenerationConfig

        specs = workload.requests
        timings = [RequestTiming(0.0, len(s.prompt)) for s in specs]
        start = now()
        for batch in self._batches(workload):
            after = specs[batch[0]].after_tokens
            arrival = start if after == 0 else max(
                timings[i].token_times[min(after, specs[i].max_tokens) - 1] for i in range(batch[0])
            )
            for i in batch:
                timings[i].submit = arrival
            prompts = [specs[i].prompt for i in batch]
            width = max(len(p) for p in prompts)
            ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=self.ctx.device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.ctx.device)
            max_new = max(specs[i].max_tokens for i in batch)
            config = GenerationConfig(
                max_new_tokens=max_new, min_new_tokens=max_new, do_sample=False,
                pad_token_id=self.pad_id, eos_token_id=None,
            )
            clock = _StepClock()
            with torch.inference_mode():
                out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                          streamer=clock)
            for row, i in enumerate(batch):
                n = specs[i].max_tokens
                timings[i].token_ids = out[row, width : width + n].tolist()
                timings[i].token_times = clock.times[:n]
        return RunResult(timings)

    def _batches(self, workload: Workload) -> list[list[int]]:
        batches: list[list[int]] = []
        for i, spec in enumerate(workload.requests):
            starts_new = not batches or spec.after_tokens > 0 or len(batches[-1]) >= self.ctx.hf_batch_size
            if starts_new:
                batches.append([i])
            else:
                batches[-1].append(i)
        return batches


class HFGenerateBatchPeer(_HFPeer):
    """transformers continuous batching: ``generate_batch``'s own manager, set up exactly as
    ``generate_batch`` sets it up, driven directly so that a request can arrive mid-run.

    Given the same KV pool (tokens), token budget, page size and request cap as Batchscope.
    """

    def run(self, workload: Workload) -> RunResult:
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig
        from transformers.generation.continuous_batching.utils import WorkloadHints

        specs = workload.requests
        gen_config = GenerationConfig(
            max_new_tokens=max(s.max_tokens for s in specs), do_sample=False,
            pad_token_id=self.pad_id, eos_token_id=-1,  # -1: EOS disabled
        )
        shapes = ModelShapes.from_config(self.model.config)
        page = 16  # Batchscope's CPU/torch-backend block size
        kv_tokens = int(self.ctx.kv_cache_memory_gb * 2**30) // shapes.kv_bytes_per_token(self.ctx.torch_dtype.itemsize)
        # transformers 5.17 (the GPU check's image) calls the page size block_size; later ones page_size
        page_field = "page_size" if "page_size" in {f.name for f in fields(ContinuousBatchingConfig)} else "block_size"
        cb_config = ContinuousBatchingConfig(
            **{page_field: page}, num_blocks=kv_tokens // page, max_batch_tokens=self.ctx.token_budget,
            max_requests_per_batch=self.ctx.max_num_seqs, seed=0,
        )
        hints = WorkloadHints(max(len(s.prompt) for s in specs), max(s.max_tokens for s in specs), len(specs))
        streaming = any(s.after_tokens > 0 for s in specs)  # progress is only needed to gate arrivals
        gate = ArrivalGate(workload)
        produced = [0] * len(specs)
        final = {}
        with self.model.continuous_batching_context_manager(
            generation_config=gen_config, continuous_batching_config=cb_config, block=True, timeout=5,
            workload_hints=hints,
        ) as manager:
            def submit() -> None:
                for i in gate.due(produced):
                    manager.add_request(specs[i].prompt, request_id=f"req{i}", max_new_tokens=specs[i].max_tokens,
                                        streaming=streaming, record_timestamps=True)

            submit()
            while len(final) < len(specs):
                out = manager.get_result(timeout=1)
                if out is None:
                    if not manager.is_running():
                        raise RuntimeError("generate_batch's manager stopped before finishing")
                    continue
                i = int(out.request_id.removeprefix("req"))
                produced[i] = len(out.generated_tokens)
                if out.is_finished():
                    if out.error is not None:
                        raise RuntimeError(f"generate_batch request {i} failed: {out.error}")
                    final[i] = out
                submit()
        return RunResult([
            RequestTiming(final[i].created_time, len(s.prompt), list(final[i].timestamps),
                          list(final[i].generated_tokens))
            for i, s in enumerate(specs)
        ])


_MIXED = dict(policy="mixed", enable_chunked_prefill=True, enable_prefix_caching=True)
BATCHSCOPE_CONFIGS = {
    "bs_mixed": _MIXED,
    "bs_mixed_nochunk": dict(policy="mixed", enable_chunked_prefill=False, enable_prefix_caching=True),
    "bs_prefill_first": dict(policy="prefill_first", enable_chunked_prefill=False, enable_prefix_caching=True),
    "bs_mixed_nocache": dict(policy="mixed", enable_chunked_prefill=True, enable_prefix_caching=False),
    # bs_mixed with every step eager: what the decode CUDA graphs buy (GPU only, see below)
    "bs_mixed_eager": _MIXED | dict(cuda_graphs=False),
    "bs_mixed_bf16": _MIXED | dict(dtype="bfloat16"),  # bf16 weights and activations
    # a row's logits the same bits whatever its batch (EngineConfig.batch_invariant): what it costs
    "bs_mixed_invariant": _MIXED | dict(batch_invariant=True),
    "bs_mixed_bf16_invariant": _MIXED | dict(dtype="bfloat16", batch_invariant=True),
}
GPU_ONLY_PEERS = ("bs_mixed_eager",)  # on CPU it is bs_mixed itself
HF_PEERS = {"hf_generate": HFGeneratePeer, "hf_generate_batch": HFGenerateBatchPeer}
# The CPU engines a user would deploy, each in its own process (vllm_peer.py, llama_cpp_peer.py).
VLLM_PEERS = {"vllm_cpu": None, "vllm_cpu_bf16": "bfloat16"}  # None: the run's --dtype
LLAMA_CPP_PEERS = {"llama_cpp_f32": "f32", "llama_cpp_f16": "f16", "llama_cpp_q4_1": "q4_1"}
PEERS = (*HF_PEERS, *BATCHSCOPE_CONFIGS, *VLLM_PEERS, *LLAMA_CPP_PEERS)
# Opt-in (--peers): they need their own venv or binary, the default model, and minutes to start.
OPT_IN_PEERS = ("bs_mixed_bf16", "bs_mixed_invariant", "bs_mixed_bf16_invariant", *VLLM_PEERS, *LLAMA_CPP_PEERS)


def make_peer(name: str, ctx: PeerContext, threads: int = 1):
    if name in HF_PEERS:
        return HF_PEERS[name](ctx)
    if name in BATCHSCOPE_CONFIGS:
        return BatchscopePeer(ctx, **BATCHSCOPE_CONFIGS[name])
    if name in VLLM_PEERS:
        from .vllm_peer import VllmCpuPeer

        return VllmCpuPeer(replace(ctx, dtype=VLLM_PEERS[name] or ctx.dtype), threads)
    if name in LLAMA_CPP_PEERS:
        from .llama_cpp_peer import LlamaCppPeer
        from .worker import model_shapes

        return LlamaCppPeer(ctx, threads, LLAMA_CPP_PEERS[name], model_shapes(ctx.model).kv_bytes_per_token(4))
    raise ValueError(f"peer must be one of {PEERS}, got {name!r}")
