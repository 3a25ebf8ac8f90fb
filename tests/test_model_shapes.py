"""benchmarks.shapes: random-weight models shaped like real ones, loadable by both engines."""
from __future__ import annotations

import json

import pytest
import torch

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


def test_a_shapes_word_tokenizer_keeps_random_prompts_and_batchscope_serves_text_with_it(tmp_path):
    """Servers take text: n random ids decode to n words that encode back to the same ids (what
    vLLM's client needs of its random prompts), and Batchscope, given it as its tokenizer, reads a
    text prompt and writes each sampled token as its word. The model's directory stays without one."""
    from transformers import AutoTokenizer

    from benchmarks.shapes import word, words_tokenizer

    model, words = shaped_model("tiny-qwen", tmp_path), words_tokenizer("tiny-qwen", tmp_path)
    assert not (model / "tokenizer.json").exists() and words_tokenizer("tiny-qwen", tmp_path) == words
    tokenizer = AutoTokenizer.from_pretrained(words)
    ids = torch.randint(0, SHAPES["tiny-qwen"]["vocab_size"], (200,), generator=torch.Generator().manual_seed(0))
    assert tokenizer.encode(tokenizer.decode(ids.tolist()), add_special_tokens=False) == ids.tolist()
    assert tokenizer.eos_token_id == SHAPES["tiny-qwen"]["eos_token_id"]
    llm = LLM(str(model), tokenizer=str(words), max_num_batched_tokens=64)
    greedy = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    out = llm.generate([" ".join(map(word, [5, 6, 7, 8]))], greedy)
    assert out[0].prompt_token_ids == [5, 6, 7, 8]
    assert out[0].text.split() == [word(i) for i in out[0].token_ids] and len(out[0].token_ids) == 3


def test_a_tokenizer_that_is_not_one_is_refused_before_the_model_loads(tmp_path):
    from engine.config import EngineConfig

    with pytest.raises(ValueError, match="is not a directory with a tokenizer"):
        EngineConfig(tokenizer=str(tmp_path)).validate()


def test_serving_takes_a_shape_with_its_word_tokenizer_and_refuses_what_it_cannot_tokenize(tmp_path, monkeypatch):
    from benchmarks import serving

    monkeypatch.setattr(serving, "shaped_model", lambda name: tmp_path / name)
    monkeypatch.setattr(serving, "words_tokenizer", lambda name: tmp_path / f"{name}-words")
    served = serving.served("qwen2.5-0.5b")
    assert served.tokenizer_flags() == ["--tokenizer", str(tmp_path / "qwen2.5-0.5b-words")]
    flags = serving.client_flags(serving.Setting(), 1.0, served.tokenizer, "m", run=1)
    assert flags[flags.index("--tokenizer") + 1] == str(served.tokenizer)
    assert serving.unservable("default") is None and serving.unservable("qwen2.5-1.5b") is None
    assert "not 'default', a shape (qwen2.5-0.5b" in serving.unservable(str(tmp_path / "nowhere"))
    why = serving.unservable(str(shaped_model("tiny-qwen", tmp_path)))
    assert "has no tokenizer" in why and "pass its name" in why
