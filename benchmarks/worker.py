"""One benchmark job in its own process: ``python -m benchmarks.worker job.json out.json``.

A job is one peer over some workloads (warm-up run, then ``repeats`` measured runs each, the
fastest reported), or the telemetry-cost experiment. A process per peer keeps each peer's
peak memory, thread pools and caches its own.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

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


def run_peer(name: str, ctx: PeerContext, setting: Setting, workloads: list[str]) -> dict:
    vocab = model_shapes(ctx.model).vocab
    peer = make_peer(name, ctx)
    peer.setup()
    out = {}
    for w in workloads:
        peer.run(build(w, setting, WARMUP_SEED, vocab))
        runs = []
        for r in range(setting.repeats):
            workload = build(w, setting, r, vocab)
            cpu = time.process_time()
            with PeakMemory(torch.device(ctx.device)) as memory:
                run = peer.run(workload)
            cpu = time.process_time() - cpu
            figures = summarise(workload, run)
            figures |= {"peak_mem_mb": memory.peak_mb, "cpu_s": round(cpu, 3),
                        "output_tok_cpu_s": round(workload.num_output_tokens / cpu, 2)}
            runs.append((figures, run))
        figures, best = max(runs, key=lambda fr: fr[0]["output_tok_s"])
        out[w] = {
            "figures": figures,
            "repeats_output_tok_s": [f["output_tok_s"] for f, _ in runs],
            "peak_mem_method": memory.method,
            "steps": [asdict(s) for s in best.steps],
            "token_ids": [t.token_ids for t in runs[0][1].requests],  # repeat 0: same prompts for all peers
        }
    return out


def execute(job: dict) -> dict:
    torch.set_num_threads(job["threads"])
    ctx = PeerContext(**job["ctx"])
    setting = SETTINGS[job["setting"]]
    if job["kind"] == "telemetry":
        return telemetry_cost.measure(ctx, setting, model_shapes(ctx.model).vocab)
    return run_peer(job["peer"], ctx, setting, job["workloads"])


def main(argv: list[str]) -> None:
    result = execute(json.loads(Path(argv[0]).read_text()))
    Path(argv[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
