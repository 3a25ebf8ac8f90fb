"""`make vllm-demo` (integrations/vllm/demo.py) stopped the way a process manager, a container
stop or a CI timeout stops it: SIGTERM to demo.py, or to make in front of it. Both children (the
dashboard and vLLM, each in a session of its own) must go with it.

vLLM itself is not needed to show it: ``--vllm-python`` is a stand-in that sleeps where vLLM
would load, so the demo is stopped while "vLLM is loading", as a hurried user stops it. The
dashboard is the real ``app.py --vllm``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from vllm_env import PLUGIN_DIR, ROOT

from support.server import free_port

STOP_LIMIT_S = 40


def stand_in_vllm(tmp_path: Path) -> Path:
    script = tmp_path / "vllm-python"
    script.write_text("#!/bin/sh\nexec sleep 600\n")
    script.chmod(0o755)
    return script


def wait_for_children(process: subprocess.Popen, count: int, port: int) -> list[psutil.Process]:
    """demo.py's children once both run and the dashboard answers on ``port``."""
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        children = psutil.Process(process.pid).children(recursive=True)
        try:
            if len(children) >= count and httpx.get(f"http://127.0.0.1:{port}/", timeout=2):
                return children
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    pytest.fail(f"demo.py did not start its children (exit {process.poll()})")


def gone(processes: list[psutil.Process]) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(processes, timeout=STOP_LIMIT_S)
    for process in alive:
        process.kill()
    return alive


@pytest.mark.parametrize("via_make", [False, True], ids=["demo.py", "make"])
def test_sigterm_stops_the_demo_and_both_its_children(tmp_path, via_make):
    port = free_port()
    args = ["--port", str(port), "--vllm-port", str(free_port()), "--logs", str(tmp_path)]
    python = stand_in_vllm(tmp_path)
    if via_make:
        command = ["make", "--no-print-directory", "-o", "install", "-o", "vllm-install", "vllm-demo",
                   f"PY={sys.executable}", f"VLLM_PY={python}", f"ARGS={' '.join(args)}"]
    else:
        command = [sys.executable, str(PLUGIN_DIR / "demo.py"), "--vllm-python", str(python), *args]
    demo = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        children = wait_for_children(demo, 3 if via_make else 2, port)
        os.kill(demo.pid, signal.SIGTERM)
        demo.wait(STOP_LIMIT_S)
        left = gone(children)
        assert left == [], f"still running after SIGTERM: {[p.pid for p in left]}"
        assert "Stopping vLLM and the dashboard" in demo.stdout.read()
    finally:
        if demo.poll() is None:
            demo.kill()
