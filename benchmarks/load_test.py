"""Load test: many concurrent streaming requests (plus telemetry viewers) against a real server.

Starts the dashboard's ``app.py`` in a subprocess on loopback, fires ``--requests`` concurrent
streaming completions and keeps ``--viewers`` websocket viewers on /ws/telemetry meanwhile.
Then it checks that every request either completed or got an explicit 429, that /metrics shows
no running request and every KV block free (no leak), and reports throughput, latency
percentiles and peak server RSS.

    python -m benchmarks.load_test                      # tiny random model, 200 requests, 50 viewers
    python -m benchmarks.load_test --model default --requests 50
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks.metrics import percentile  # noqa: E402
from tests.support.server import free_port  # noqa: E402


@dataclass
class RequestResult:
    status: int = 0
    finish_reason: str | None = None
    error: str | None = None
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    latency: float = 0.0
    chunks: int = 0


def tiny_model() -> str:
    from tiny_models import build_tiny_model

    return str(build_tiny_model("smollm2", Path(tempfile.gettempdir()) / "batchscope-load-test-model"))


def server_command(args: argparse.Namespace, model: str, port: int) -> list[str]:
    limits = ["--api-max-concurrent-per-client", str(args.per_client), "--api-max-waiting", str(args.max_waiting),
              "--api-max-tokens", str(max(args.max_tokens, 1))]
    return [sys.executable, "app.py", "--model", model, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "512", "--num-kv-blocks", str(args.num_kv_blocks), *limits]


async def wait_ready(client: httpx.AsyncClient, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if (await client.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.25)
    raise TimeoutError("the server did not become ready")


async def one_request(client: httpx.AsyncClient, index: int, max_tokens: int) -> RequestResult:
    result = RequestResult()
    body = {"model": "default", "prompt": f"Request {index}: once upon a time", "max_tokens": max_tokens,
            "stream": True}
    started = last = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            result.status = response.status_code
            if response.status_code != 200:
                await response.aread()
                result.error = response.json()["error"]["message"]
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                now = time.perf_counter()
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    result.error = chunk["error"]["message"]
                    continue
                if result.ttft is None:
                    result.ttft = now - started
                else:
                    result.gaps.append(now - last)
                last = now
                result.chunks += 1
                result.finish_reason = chunk["choices"][0]["finish_reason"] or result.finish_reason
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.latency = time.perf_counter() - started
    return result


async def viewer(url: str, stop: asyncio.Event, counts: list[int], index: int) -> None:
    try:
        async with websockets.connect(url, max_size=None, open_timeout=30, ping_interval=None) as ws:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(ws.recv(), timeout=0.5)
                    counts[index] += 1
                except TimeoutError:
                    pass
    except Exception as exc:  # reported, not fatal: the requests are what is under test
        counts[index] = -1
        print(f"viewer {index}: {type(exc).__name__}: {exc}", file=sys.stderr)


async def sample_rss(process: psutil.Process, stop: asyncio.Event, peak: list[int]) -> None:
    while not stop.is_set():
        try:
            rss = process.memory_info().rss + sum(c.memory_info().rss for c in process.children(recursive=True))
        except psutil.NoSuchProcess:
            return
        peak[0] = max(peak[0], rss)
        await asyncio.sleep(0.05)


async def idle_gauges(client: httpx.AsyncClient, within: float) -> dict[str, float]:
    deadline = time.monotonic() + within
    while True:
        text = (await client.get("/metrics")).text
        values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                  if line.startswith("batchscope_") and "{" not in line}
        if values["batchscope_requests_running"] == 0 and values["batchscope_requests_waiting"] == 0 and (
                values["batchscope_kv_blocks_free"] == values["batchscope_kv_blocks_total"]) or (
                time.monotonic() > deadline):
            return values
        await asyncio.sleep(0.1)


async def run(args: argparse.Namespace) -> dict:
    model = args.model or tiny_model()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(server_command(args, model, port), cwd=ROOT)
    try:
        limits = httpx.Limits(max_connections=args.requests + 10, max_keepalive_connections=args.requests + 10)
        async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(args.timeout), limits=limits) as client:
            await wait_ready(client, process, args.startup_timeout)
            server = psutil.Process(process.pid)
            baseline = server.memory_info().rss
            stop, peak, counts = asyncio.Event(), [baseline], [0] * args.viewers
            background = [asyncio.create_task(sample_rss(server, stop, peak))]
            background += [asyncio.create_task(viewer(f"ws://127.0.0.1:{port}/ws/telemetry", stop, counts, i))
                           for i in range(args.viewers)]
            started = time.perf_counter()
            results = await asyncio.gather(*(one_request(client, i, args.max_tokens) for i in range(args.requests)))
            elapsed = time.perf_counter() - started
            gauges = await idle_gauges(client, within=5.0)
            stop.set()
            await asyncio.gather(*background)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return summarize(args, results, elapsed, gauges, baseline, peak[0], counts)


def summarize(args, results: list[RequestResult], elapsed: float, gauges: dict, baseline: int, peak: int,
              viewer_counts: list[int]) -> dict:
    done = [r for r in results if r.status == 200 and r.error is None and r.finish_reason in ("stop", "length")]
    refused = [r for r in results if r.status == 429]
    other = [r for r in results if r not in done and r not in refused]
    ttft = [r.ttft * 1e3 for r in done]
    itl = [g * 1e3 for r in done for g in r.gaps]
    latency = [r.latency * 1e3 for r in done]
    return {
        "requests": len(results), "completed": len(done), "rejected_429": len(refused),
        "other_failures": len(other), "failure_samples": [r.error or r.status for r in other[:5]],
        "elapsed_s": round(elapsed, 2), "requests_per_s": round(len(done) / elapsed, 2),
        "tokens_per_s": round(sum(r.chunks for r in done) / elapsed, 1),
        "ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99)},
        "itl_ms": {"p50": percentile(itl, 50), "p99": percentile(itl, 99)},
        "latency_ms": {"p50": percentile(latency, 50), "p99": percentile(latency, 99)},
        "kv_blocks_leaked": gauges["batchscope_kv_blocks_total"] - gauges["batchscope_kv_blocks_free"],
        "running_after": gauges["batchscope_requests_running"],
        "server_rss_mb": {"baseline": round(baseline / 2**20), "peak": round(peak / 2**20)},
        "viewers": {"connected": sum(c >= 0 for c in viewer_counts), "failed": sum(c < 0 for c in viewer_counts),
                    "messages": sum(c for c in viewer_counts if c > 0)},
        "ok": not other and gauges["batchscope_kv_blocks_total"] == gauges["batchscope_kv_blocks_free"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model to serve (default: a tiny random SmolLM2-shaped model)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--viewers", type=int, default=50, help="websocket viewers on /ws/telemetry")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--num-kv-blocks", type=int, default=1024,
                        help="server's KV pool (records list every block, so keep it realistic)")
    parser.add_argument("--per-client", type=int, default=1000, help="server's per-client limit")
    parser.add_argument("--max-waiting", type=int, default=64, help="server's waiting-queue limit")
    parser.add_argument("--timeout", type=float, default=120.0, help="per-request timeout, seconds")
    parser.add_argument("--startup-timeout", type=float, default=180.0)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print(json.dumps(report, indent=2))
    sys.exit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
