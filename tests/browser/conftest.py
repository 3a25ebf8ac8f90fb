"""Fixtures of the browser tests: the shipped trace's records (read here, as plain JSON Lines)
and ``app.py --replay`` of it in its own process."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.jsonl*"))


@dataclass
class ReplayServer:
    url: str
    process: subprocess.Popen
    startup_s: float


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """The IterationRecord dicts of the shipped trace, in order."""
    assert SHIPPED, "assets/traces/ holds no trace"
    with gzip.open(SHIPPED[0], "rt", encoding="utf-8") as lines:
        entries = [json.loads(line) for line in lines if line.strip()]
    return [e["data"] for e in entries if e.get("type") == "record"]


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
