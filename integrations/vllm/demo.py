"""`make vllm-demo`: vLLM serves Batchscope's default model with the Batchscope plugin on, and
the dashboard is attached to it, on this machine.

    make vllm-demo ARGS="--port 7860 --vllm-port 8000"

Run with Batchscope's python. The dashboard starts first (``app.py --vllm URL``, a fresh ingest
token in its environment), so the page is up at once and says it waits for vLLM; then vLLM's
OpenAI server starts from vLLM's venv with ``BATCHSCOPE_INGEST`` pointing at the dashboard's
/ingest, and this script shows its progress until it answers. Ctrl-C, SIGTERM (a process
manager, a container stop, a CI timeout; make passes it on) or either process ending stops
both: each runs in a session of its own, so no signal to this script's group reaches them.
Logs: out/vllm-demo-{vllm,dashboard}.log.
"""
from __future__ import annotations

import argparse
import secrets
import signal
import sys
import time
from pathlib import Path

import launch

POLL_S = 1.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--port", type=int, default=7860, help="the dashboard's port")
    parser.add_argument("--vllm-port", type=int, default=8000, help="vLLM's OpenAI API port")
    parser.add_argument("--vllm-python", type=Path, default=launch.VLLM_PYTHON)
    parser.add_argument("--max-num-batched-tokens", type=int, default=256,
                        help="vLLM's token budget per step (small: prefills get chunked)")
    parser.add_argument("--record", metavar="TRACE", help="record the run (app.py --record)")
    parser.add_argument("--logs", type=Path, default=launch.ROOT / "out")
    return parser.parse_args()


def show_progress(seconds: float, line: str) -> None:
    print(f"\r  vLLM loading, {seconds:3.0f} s: {line[-80:]:80}", end="", flush=True)


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as Ctrl-C does
    if not args.vllm_python.exists():
        sys.exit(f"{args.vllm_python} is missing: run `make vllm-install` first")
    token = secrets.token_hex(16)
    print("Converting the default model once if needed...", flush=True)
    model_dir = launch.default_model_dir()
    vllm_url = f"http://127.0.0.1:{args.vllm_port}"
    extra = ["--record", args.record] if args.record else []
    dashboard = launch.start_dashboard(args.port, vllm_url, token, args.logs / "vllm-demo-dashboard.log",
                                       *extra)
    vllm = launch.start_vllm(model_dir, args.vllm_port, args.logs / "vllm-demo-vllm.log",
                             "--max-num-batched-tokens", str(args.max_num_batched_tokens),
                             ingest_url=launch.ingest_url(args.port), token=token,
                             python=args.vllm_python)
    try:
        dashboard.wait_healthy("/", limit=120)
        print(f"Dashboard: http://127.0.0.1:{args.port} (it waits for vLLM to connect)", flush=True)
        seconds = vllm.wait_healthy("/health", progress=show_progress)
        print(f"\nvLLM ready after {seconds:.0f} s at {vllm_url}; the dashboard is attached. "
              "Press Fire. Ctrl-C stops both.", flush=True)
        while vllm.alive() and dashboard.alive():
            time.sleep(POLL_S)
        gone = "vLLM" if not vllm.alive() else "the dashboard"
        print(f"{gone} stopped; see {args.logs}", flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nStopping vLLM and the dashboard...", flush=True)
        return 0
    except RuntimeError as exc:
        print(f"\n{exc}", flush=True)
        return 1
    finally:
        vllm.stop()
        dashboard.stop()


if __name__ == "__main__":
    sys.exit(main())
