"""One benchmark job in its own process: ``python -m benchmarks.worker job.json out.json``.

A job is one peer over some workloads (warm-up run, then ``repeats`` measured runs each, from
repeat ``first_repeat``: repeat r always gets the prompts of seed r; the fastest reported), or the
telemetry-cost experiment. A process per peer keeps each peer's
peak memory, thread pools and caches its own.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import psutil
import torch

from . import telemetry_cost
from .memory import PeakMemory
from .metrics import summarise
from .peers import PeerContext, make_peer
from .roofline import ModelShapes
from .settings import SETTINGS, Setting
from .workloads import WARMUP_SEED, build


def model_shapes(model: str) -> ModelShapes:
    from transformers import AutoConfig

    from engine.loader import resolve_model_dir

    return ModelShapes.from_config(AutoConfig.from_pretrained(resolve_model_dir(model)[1]))


def cpu_seconds() -> float:
    """CPU time of this process and its live children (vLLM's engine, llama-server)."""
    children = psutil.Process().children(recursive=True)
    return time.process_time() + sum(sum(c.cpu_times()[:2]) for c in children if c.is_running())


def run_peer(name: str, ctx: PeerContext, setting: Setting, workloads: list[str], threads: int,
             first_repeat: int = 0) -> dict:
    vocab = model_shapes(ctx.model).vocab
    peer = make_peer(name, ctx, threads)
    peer.setup()
    try:
        return {"info": peer.info()} | {w: _measure(peer, ctx, setting, w, vocab, first_repeat) for w in workloads}
    finally:
        if hasattr(peer, "close"):
            peer.close()


def _measure(peer, ctx: PeerContext, setting: Setting, w: str, vocab: int, first_repeat: int) -> dict:
    peer.run(build(w, setting, WARMUP_SEED, vocab))
    runs = []
    for r in range(first_repeat, first_repeat + setting.repeats):
        workload = build(w, setting, r, vocab)
        cpu = cpu_seconds()
        with PeakMemory(torch.device(ctx.device)) as memory:
            run = peer.run(workload)
        cpu = cpu_seconds() - cpu
        figures = summarise(workload, run)
        figures |= {"peak_mem_mb": memory.peak_mb, "cpu_s": round(cpu, 3),
                    "output_tok_cpu_s": round(workload.num_output_tokens / cpu, 2)}
        runs.append((figures, run))
    figures, best = max(runs, key=lambda fr: fr[0]["output_tok_s"])
    return {
        "figures": figures,
        "repeats_output_tok_s": [f["output_tok_s"] for f, _ in runs],
        "peak_mem_method": memory.method,
        "steps": [asdict(s) for s in best.steps],
        "token_ids": [t.token_ids for t in runs[0][1].requests],  # its first repeat: same prompts for all peers
    }


def execute(job: dict) -> dict:
    torch.set_num_threads(job["threads"])
    ctx = PeerContext(**job["ctx"])
    setting = replace(SETTINGS[job["setting"]], repeats=job.get("repeats") or SETTINGS[job["setting"]].repeats)
    if job["kind"] == "telemetry":
        return telemetry_cost.measure(ctx, setting, model_shapes(ctx.model).vocab)
    return run_peer(job["peer"], ctx, setting, job["workloads"], job["threads"], job.get("first_repeat", 0))


def main(argv: list[str]) -> None:
    result = execute(json.loads(Path(argv[0]).read_text()))
    Path(argv[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
