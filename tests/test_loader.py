"""Loading: the default model from the installed package, cached after the first conversion."""
import time

from engine import LLM, SamplingParams
from engine.loader import resolve_model_dir


def test_default_model_is_cached_as_safetensors_and_loads_fast():
    name, directory = resolve_model_dir("default")
    assert name == "SmolLM2-135M-Instruct"
    assert (directory / "model.safetensors").is_file() and (directory / "tokenizer.json").is_file()
    started = time.perf_counter()
    again = resolve_model_dir("default")[1]
    assert again == directory and time.perf_counter() - started < 1.0  # no second conversion


def test_default_model_answers_a_chat_prompt():
    llm = LLM("default", max_model_len=512)
    prompt = llm.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True,
        tokenize=False)
    out = llm.generate([prompt], SamplingParams(max_tokens=12, temperature=0))[0]
    assert "Paris" in out.text
    assert out.finish_reason in ("stop", "length")
