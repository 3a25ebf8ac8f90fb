"""Bad input gets a ValueError naming the field and the limit; the engine keeps serving."""
import json

import pytest

from engine import LLM, EngineConfig, LLMEngine, SamplingParams


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return LLMEngine(tiny_model_dir, EngineConfig(max_model_len=256, num_kv_blocks=8, block_size=16))


@pytest.mark.parametrize("prompt, params, match", [
    ("", None, "prompt: must contain at least one token"),
    ([], None, "prompt: must contain at least one token"),
    ([1] * 256, None, "max_model_len is 256"),
    ([5, 49152], None, r"token id 49152 is outside the vocabulary \[0, 49152\)"),
    ([5, -1], None, "token id -1"),
    ([5, "x"], None, "token id 'x'"),
    (3.5, None, "prompt: expected a string or a list of token ids"),
    ([5], dict(max_tokens=200), "needs up to 13 KV blocks .* num_kv_blocks=8"),
])
def test_bad_prompts(engine, prompt, params, match):
    with pytest.raises(ValueError, match=match):
        engine.add_request(prompt, SamplingParams(**(params or {})))


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_tokens=0), "max_tokens must be an integer >= 1"),
    (dict(temperature=-0.5), "temperature must be a number >= 0"),
    (dict(top_p=0), r"top_p must be in \(0, 1\]"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(top_k=-3), "top_k"),
    (dict(min_p=2), r"min_p must be in \[0, 1\]"),
    (dict(seed="abc"), "seed must be an integer"),
    (dict(stop=[""]), "stop must be non-empty strings"),
])
def test_bad_sampling_params(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(block_size=0), "block_size must be a positive integer"),
    (dict(policy="fastest"), "policy must be one of"),
    (dict(dtype="int3"), "dtype must be one of"),
    (dict(max_num_seqs=-1), "max_num_seqs"),
    (dict(unknown_knob=1), "unknown option"),
])
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EngineConfig.from_kwargs(**kwargs)


def test_unknown_model_path_and_architecture(tmp_path):
    with pytest.raises(ValueError, match="expected 'default', a directory with config.json"):
        LLM(str(tmp_path / "missing"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError, match="unsupported architecture 'GPT2LMHeadModel'"):
        LLM(str(tmp_path))


def test_engine_keeps_serving_after_rejections(engine):
    good = engine.add_request([5, 6, 7], SamplingParams(max_tokens=4, temperature=0))
    for bad in ("", [10**9]):
        with pytest.raises(ValueError):
            engine.add_request(bad)
    while engine.has_unfinished:
        engine.step()
    assert len(good.output_token_ids) == 4
    assert engine.block_manager.num_free == 8


def test_generate_rejects_whole_batch_before_queueing(tiny_model_dir):
    llm = LLM(tiny_model_dir)
    with pytest.raises(ValueError, match="prompt: must contain"):
        llm.generate([[5, 6], ""], SamplingParams(max_tokens=2))
    assert not llm.engine.has_unfinished  # the good prompt was not left queued
    out = llm.generate([[5, 6]], SamplingParams(max_tokens=2))
    assert len(out[0].token_ids) == 2


def test_default_kv_pool_is_capped_but_explicit_memory_is_honoured():
    from engine.config import MAX_AUTO_BLOCKS

    sizes = dict(device="cpu", max_num_seqs=256, max_model_len=4096)
    default = EngineConfig(**sizes).for_device().for_model(8192, bytes_per_token=1024)
    assert default.num_kv_blocks == MAX_AUTO_BLOCKS  # small enough for per-block telemetry
    explicit = EngineConfig(**sizes, kv_cache_memory_gb=1.0).for_device().for_model(8192, bytes_per_token=1024)
    assert explicit.num_kv_blocks == 2**30 // (1024 * 16)  # 65,536 blocks: what 1 GB holds
