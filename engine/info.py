"""What a loaded engine tells its fronts: ``ModelInfo`` (fixed once loaded) and ``SourceInfo``
(what it is as a record source, with the header a trace file of its run needs)."""
from __future__ import annotations

import dataclasses
import os
import platform
from dataclasses import dataclass

import torch

from .llm_engine import LLMEngine
from .record_source import SourceInfo
from .telemetry import ENGINE_NAME, ENGINE_VERSION, PHASES


@dataclass(frozen=True)
class ModelInfo:
    name: str
    max_model_len: int
    vocab_size: int
    block_size: int
    num_kv_blocks: int
    has_chat_template: bool
    eos_token_ids: frozenset[int]


def model_info(engine: LLMEngine) -> ModelInfo:
    config = engine.config
    return ModelInfo(
        name=engine.model_name,
        max_model_len=config.max_model_len,
        vocab_size=engine.vocab_size,
        block_size=config.block_size,
        num_kv_blocks=config.num_kv_blocks,
        has_chat_template=bool(getattr(engine.tokenizer, "chat_template", None)),
        eos_token_ids=frozenset(engine.loaded.eos_token_ids),
    )


def source_info(engine: LLMEngine | None, model: str) -> SourceInfo:
    """The engine as a record source; before it has loaded, only what the caller asked for."""
    if engine is None:
        return SourceInfo(ENGINE_NAME, ENGINE_VERSION, model, PHASES)
    config = engine.config
    return SourceInfo(ENGINE_NAME, ENGINE_VERSION, engine.model_name, PHASES,
                      block_size=config.block_size, num_kv_blocks=config.num_kv_blocks,
                      max_model_len=config.max_model_len, trace_header=trace_header(engine),
                      can_fire=True)


def trace_header(engine: LLMEngine) -> dict:
    """Model config, engine config (as it is now: presenter controls change it) and hardware."""
    hf_config = engine.loaded.config
    config = hf_config.to_dict() if hasattr(hf_config, "to_dict") else {}
    config.pop("_name_or_path", None)  # the server's local directory: traces are shared
    return {
        "model": {"name": engine.model_name, "config": config},
        "engine": dataclasses.asdict(engine.config),
        "hardware": hardware(engine.config.device),
        "plan": {**engine.runner.plan.to_dict(), "summary": engine.runner.plan.summary()},
    }


def hardware(device: str) -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "device": device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
    }
