"""benchmarks.shapes: random-weight models shaped like real ones, loadable by both engines."""
from __future__ import annotations

import json

import pytest

from benchmarks.external import missing_reason, resolved_model
from benchmarks.shapes import SHAPES, shaped_model
from benchmarks.vllm_peer import model_args
from engine import LLM, SamplingParams


def test_a_shaped_model_is_built_once_and_serves_token_id_prompts(tmp_path):
    directory = shaped_model("tiny-qwen", tmp_path)
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["hidden_size"] == SHAPES["tiny-qwen"]["hidden_size"]
    stamp = (directory / "model.safetensors").stat().st_mtime_ns
    assert shaped_model("tiny-qwen", tmp_path) == directory
    assert (directory / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt
    llm = LLM(str(directory), max_num_batched_tokens=64)
    out = llm.generate([[5, 6, 7, 8]], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))
    assert len(out[0].token_ids) == 3
    with pytest.raises(ValueError, match="choose from qwen2.5-0.5b"):
        shaped_model("llama-70b", tmp_path)


def test_vllm_is_told_the_architecture_and_the_tokenizer_only_when_the_directory_lacks_them(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": None}))
    told = model_args(tmp_path)
    assert told == {"hf_overrides": {"architectures": ["LlamaForCausalLM"]}, "skip_tokenizer_init": True}
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    (tmp_path / "tokenizer.json").write_text("{}")
    assert model_args(tmp_path) == {}


def test_the_vllm_peer_takes_a_shaped_directory_and_llama_cpp_only_the_default(tmp_path):
    """Both engines load the same directory; llama.cpp's peers need the default model's GGUF."""
    directory = str(shaped_model("tiny-qwen", tmp_path))
    assert "default model only" not in (missing_reason("vllm_cpu", directory, False) or "")
    assert resolved_model("vllm_cpu", directory) == directory
    assert "default model only" in missing_reason("llama_cpp_f32", directory, False)
