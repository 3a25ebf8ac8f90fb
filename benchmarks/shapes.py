"""Random-weight models with the shapes of real ones, for measuring beyond the default model
without a download: ``python -m benchmarks.shapes qwen2.5-0.5b`` builds the directory once (under
``~/.cache/batchscope/shapes``) and prints its path, for ``python -m benchmarks --model PATH``.

The weights are random (bf16 on disk, as the real checkpoints are) and there is no tokenizer:
the workloads are token-id prompts, generated with ``ignore_eos``, so every engine does the same
work as with the real model of that shape. Both Batchscope and vLLM load the same directory.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

CACHE = Path.home() / ".cache" / "batchscope" / "shapes"
QWEN25_05B = dict(
    hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0,
    rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
)
QWEN25_15B = dict(QWEN25_05B, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12)
# head size 64: vLLM's CPU attention has no kernels for smaller heads (the dry run's vLLM trace)
TINY_QWEN = dict(QWEN25_05B, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=1024, max_position_embeddings=2048,
                 bos_token_id=1, eos_token_id=2)
SHAPES = {"qwen2.5-0.5b": QWEN25_05B, "qwen2.5-1.5b": QWEN25_15B, "tiny-qwen": TINY_QWEN}


def build_model(directory: Path, shapes: dict, seed: int = 0) -> Path:
    """A random Qwen2 model saved with save_pretrained (bf16 on disk, no tokenizer)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    config = Qwen2Config(**shapes, initializer_range=0.05, use_sliding_window=False)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(directory)
    return directory


def shaped_model(name: str, cache: Path = CACHE) -> Path:
    """The directory of the model shaped like ``name``, built on first use."""
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; choose from {', '.join(SHAPES)}")
    directory = cache / f"{name}-random"
    if not (directory / "config.json").exists():
        build_model(directory.with_name(directory.name + ".partial"), SHAPES[name]).rename(directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shapes", description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=SHAPES)
    print(shaped_model(parser.parse_args().shape))


if __name__ == "__main__":
    main()
