"""Random-weight models with the shapes of real ones, for measuring beyond the default model
without a download: ``python -m benchmarks.shapes qwen2.5-0.5b`` builds the directory once (under
``~/.cache/batchscope/shapes``) and prints its path, for ``python -m benchmarks --model PATH``.

The weights are random (bf16 on disk, as the real checkpoints are) and there is no tokenizer:
the workloads are token-id prompts, generated with ``ignore_eos``, so every engine does the same
work as with the real model of that shape. Both Batchscope and vLLM load the same directory.

Servers take text: ``words_tokenizer`` builds, beside the model, a tokenizer whose token i is a
word of its own (``word``, split on whitespace), so that n random ids decode to n words that encode
back to the same n ids, as vLLM's serving client needs of its random prompts. It is a directory of
its own, for each server's and the client's ``--tokenizer``: in the model's directory transformers'
AutoTokenizer would load it as the Qwen2 tokenizer its config names, whose byte-level BPE knows none
of the words.
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


def _shape(name: str) -> dict:
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; choose from {', '.join(SHAPES)}")
    return SHAPES[name]


def shaped_model(name: str, cache: Path = CACHE) -> Path:
    """The directory of the model shaped like ``name``, built on first use."""
    shapes, directory = _shape(name), cache / f"{name}-random"
    if not (directory / "config.json").exists():
        build_model(directory.with_name(directory.name + ".partial"), shapes).rename(directory)
    return directory


def word(token_id: int) -> str:
    """Token ``token_id``'s word: one width for every id, since special tokens (bos, eos) are found
    anywhere in a text, and ``t1`` would be found inside ``t192``."""
    return f"t{token_id:06d}"


def word_tokenizer(vocab_size: int, bos_token_id: int, eos_token_id: int):
    """A fast tokenizer whose token i is the word ``word(i)`` (whitespace-split, joined by spaces)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({word(i): i for i in range(vocab_size)}, unk_token=word(0)))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=words, bos_token=word(bos_token_id), eos_token=word(eos_token_id))


def words_tokenizer(name: str, cache: Path = CACHE) -> Path:
    """The directory of the word tokenizer (above) for the model shaped like ``name``, built once."""
    shapes, directory = _shape(name), cache / f"{name}-words"
    if not (directory / "tokenizer.json").exists():
        partial = directory.with_name(directory.name + ".partial")
        word_tokenizer(shapes["vocab_size"], shapes["bos_token_id"], shapes["eos_token_id"]).save_pretrained(partial)
        partial.rename(directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shapes", description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=SHAPES)
    print(shaped_model(parser.parse_args().shape))


if __name__ == "__main__":
    main()
