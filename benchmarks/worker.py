"""One peer in a process of its own for a whole sitting, or one telemetry job.

``python -m benchmarks.worker --serve FD``: a ``PeerSession`` driven by JSON lines on stdin
(``{"setup": job}``, then ``{"repeat": r}`` as often as asked, then ``{"close": true}``), each
answered by one JSON line on file descriptor FD; stdout and stderr stay the libraries' log.
The peer loads and warms up once, then runs repeat r of each of its workloads when the runner
says so: the runner can then put repeat r of every peer seconds apart, where a process per peer
and repeat put them minutes apart (vLLM takes 1.5-2 min to start) on a host whose speed drifts
from minute to minute. A process per peer keeps each peer's peak memory, thread pools and
caches its own.

``python -m benchmarks.worker job.json out.json``: the telemetry-cost experiment.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

import psutil
import torch

from . import telemetry_cost
from .memory import PeakMemory
from .metrics import summarise
from .peers import PeerContext, make_peer
from .roofline import ModelShapes
from .settings import SETTINGS
from .workloads import WARMUP_SEED, build


def model_shapes(model: str) -> ModelShapes:
    from transformers import AutoConfig

    from engine.loader import resolve_model_dir

    return ModelShapes.from_config(AutoConfig.from_pretrained(resolve_model_dir(model)[1]))


def cpu_seconds() -> float:
    """CPU time of this process and its live children (vLLM's engine, llama-server)."""
    children = psutil.Process().children(recursive=True)
    return time.process_time() + sum(sum(c.cpu_times()[:2]) for c in children if c.is_running())


class PeerSession:
    """One peer, loaded and warmed up on each of its workloads (the warm-up seed's prompts), ready
    to run any repeat of them; ``repeat(r)`` gets the prompts of seed r."""

    def __init__(self, job: dict):
        torch.set_num_threads(job["threads"])
        self.ctx = PeerContext(**job["ctx"])
        self.setting = SETTINGS[job["setting"]]
        self.workloads: list[str] = job["workloads"]
        self.vocab = model_shapes(self.ctx.model).vocab
        self.peer = make_peer(job["peer"], self.ctx, job["threads"])
        self.peer.setup()
        for w in self.workloads:
            self.peer.run(build(w, self.setting, WARMUP_SEED, self.vocab))
        self.info: dict = self.peer.info()

    def repeat(self, r: int) -> dict:
        """Each workload's entry for one run: its figures, steps and token ids."""
        return {w: self._measure(w, r) for w in self.workloads}

    def _measure(self, w: str, r: int) -> dict:
        workload = build(w, self.setting, r, self.vocab)
        cpu = cpu_seconds()
        with PeakMemory(torch.device(self.ctx.device)) as memory:
            run = self.peer.run(workload)
        cpu = cpu_seconds() - cpu
        figures = summarise(workload, run) | {
            "peak_mem_mb": memory.peak_mb, "cpu_s": round(cpu, 3),
            "output_tok_cpu_s": round(workload.num_output_tokens / cpu, 2)}
        return {"figures": figures, "repeats_output_tok_s": [figures["output_tok_s"]], "peak_mem_method": memory.method,
                "steps": [asdict(s) for s in run.steps], "token_ids": [t.token_ids for t in run.requests]}

    def close(self) -> None:
        if hasattr(self.peer, "close"):
            self.peer.close()


def serve(result_fd: int) -> None:
    """Answer the runner's commands until it closes the session or a command fails."""
    server = _Server()
    with os.fdopen(result_fd, "w") as answers:
        for line in sys.stdin:
            command = json.loads(line)
            try:
                answer = server.obey(command)
            except Exception:  # noqa: BLE001 - every failure goes back to the runner, which reports it
                answer = {"error": traceback.format_exc()}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
            if "close" in command or "error" in answer:
                break


class _Server:
    session: PeerSession | None = None

    def obey(self, command: dict) -> dict:
        if "setup" in command:
            self.session = PeerSession(command["setup"])
            return {"info": self.session.info}
        if self.session is None:
            raise RuntimeError(f"{command} before setup")
        if "repeat" in command:
            return self.session.repeat(command["repeat"])
        self.session.close()
        return {}


def execute(job: dict) -> dict:
    """The telemetry-cost experiment (one job, one process)."""
    torch.set_num_threads(job["threads"])
    setting = replace(SETTINGS[job["setting"]], repeats=job.get("repeats") or SETTINGS[job["setting"]].repeats)
    return telemetry_cost.measure(PeerContext(**job["ctx"]), setting, model_shapes(job["ctx"]["model"]).vocab)


def main(argv: list[str]) -> None:
    if argv[0] == "--serve":
        serve(int(argv[1]))
        return
    result = execute(json.loads(Path(argv[0]).read_text()))
    Path(argv[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
