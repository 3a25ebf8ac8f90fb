"""Fixtures of the browser tests: the shipped trace and ``app.py --replay`` in its own process."""
from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.server import free_port

from viz.trace import load_trace

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.jsonl*"))


@dataclass
class ReplayServer:
    url: str
    process: subprocess.Popen
    startup_s: float


@pytest.fixture(scope="module")
def trace():
    assert SHIPPED, "assets/traces/ holds no trace"
    return load_trace(SHIPPED[0])


@pytest.fixture(scope="module")
def replay_server(tmp_path_factory):
    port = free_port()
    log = (tmp_path_factory.mktemp("replay") / "server.log").open("w")
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "app.py", "--replay", str(SHIPPED[0]), "--port", str(port)],
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
        yield ReplayServer(url, process, time.monotonic() - started)
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()
