"""Does a viewer that stops reading slow the engine down? (It must not.)

Runs the dashboard server on a model, keeps the engine busy with decoding requests, and
measures engine steps per second in alternating windows: no viewer connected, then a viewer
that completed the websocket handshake and never reads a byte (its socket buffers fill, so
the server's sends to it block; its outbox must drop frames instead). Prints the numbers and
saves them to benchmarks/results/slow_viewer.json.

    python benchmarks/slow_viewer.py [--model default] [--window 5] [--rounds 3]
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import app as dashboard  # noqa: E402
from engine import SamplingParams  # noqa: E402
from tests.support.server import BackgroundServer  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "slow_viewer.json"
PROMPT = "Write a long story about a lighthouse keeper who collects clocks."


class StalledViewer:
    """A websocket client that upgrades the connection and then never reads."""

    def __init__(self, host: str, port: int):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((host, port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /ws/telemetry HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(1)  # the handshake only, byte by byte
        if b" 101 " not in response.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"websocket upgrade refused: {response[:80]!r}")

    def close(self) -> None:
        self.sock.close()


class Load:
    """Keeps ``width`` long decoding requests in flight; counts engine steps."""

    def __init__(self, llm, width: int, max_tokens: int):
        self.llm, self.width, self.max_tokens = llm, width, max_tokens
        self.steps = 0
        self._stop = threading.Event()
        llm.subscribe(self._count)
        self._threads = [threading.Thread(target=self._keep_one, daemon=True) for _ in range(width)]

    def _count(self, _record) -> None:
        self.steps += 1

    def _keep_one(self) -> None:
        params = SamplingParams(max_tokens=self.max_tokens, temperature=0.8, ignore_eos=True)
        while not self._stop.is_set():
            self.llm.add_request(PROMPT, params).collect()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()

    def rate(self, seconds: float) -> float:
        start, t0 = self.steps, time.perf_counter()
        time.sleep(seconds)
        return (self.steps - start) / (time.perf_counter() - t0)


def wait_until_dropping(hub, timeout: float) -> bool:
    """Wait until the stalled viewer's buffers are full and its outbox drops frames."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(v.dropped for v in hub.viewers):
            return True
        time.sleep(0.1)
    return False


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--window", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=4, help="none/slow window pairs")
    parser.add_argument("--width", type=int, default=8, help="requests decoding at once")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per request")
    parser.add_argument("--num-kv-blocks", type=int, default=None,
                        help="a larger pool makes every record (and frame) larger")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--stall-timeout", type=float, default=15.0,
                        help="seconds to wait for the stalled viewer's outbox to start dropping")
    opts = parser.parse_args(argv)
    if opts.threads:
        import torch

        torch.set_num_threads(opts.threads)
    flags = ["--model", opts.model, "--shared-view"]  # text to every viewer: the largest frames
    if opts.num_kv_blocks:
        flags += ["--num-kv-blocks", str(opts.num_kv_blocks)]
    app, llm, hub = dashboard.create_app(dashboard.build_parser().parse_args(flags))
    with BackgroundServer(app) as server:
        llm.wait_ready(600)
        load = Load(llm, opts.width, max_tokens=opts.max_tokens)
        load.start()
        time.sleep(opts.window / 2)  # warm up
        rates: dict[str, list[float]] = {"none": [], "slow": []}
        dropped, stalled = 0, []
        for i in range(opts.rounds):  # ABBA order, so a drifting load rate cancels out
            for phase in (("none", "slow") if i % 2 == 0 else ("slow", "none")):
                if phase == "none":
                    rates["none"].append(load.rate(opts.window))
                    continue
                viewer = StalledViewer(server.host, server.port)
                stalled.append(wait_until_dropping(hub, opts.stall_timeout))
                rates["slow"].append(load.rate(opts.window))
                dropped += sum(v.dropped for v in hub.viewers)
                viewer.close()
                time.sleep(0.5)
        load.stop()
    none, slow = statistics.median(rates["none"]), statistics.median(rates["slow"])
    result = {
        "model": llm.engine.model_name, "window_s": opts.window, "rounds": opts.rounds,
        "width": opts.width, "max_tokens": opts.max_tokens, "num_kv_blocks": llm.config.num_kv_blocks,
        "threads": opts.threads, "steps_per_s": rates,
        "median_none": round(none, 3), "median_slow": round(slow, 3),
        "slow_vs_none": round(slow / none, 4), "frames_dropped_for_slow_viewer": dropped,
        "slow_windows_measured_while_dropping": sum(stalled),
        "within_5_percent": abs(slow / none - 1) <= 0.05,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
