"""OpenAI log-probabilities over a loopback server: the official client parses completions'
``logprobs`` and chat's ``logprobs``/``top_logprobs``, streamed and whole; the values, and the
top tokens, equal transformers' log-softmax of its own logits (fp32) for greedy prompts, and the
streamed ones the whole ones; bad values are 400s."""
from __future__ import annotations

import httpx
import openai
import pytest
import torch
from test_logprobs import TOLERANCE, hf_logprobs

from serve.limits import ApiLimits

from api_server import api_url, running_llm
from hf_reference import hf_greedy, load_hf

TOP = 3
NEAR_TIES = 8  # transformers' next best tokens, where a reported one may stand after a near-tie
MAX_TOKENS = 6
PROMPT = [5, 17, 300, 41, 9]
MESSAGES = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    yield from running_llm(tiny_model_dir, device="cpu", dtype="float32", max_model_len=256,
                           num_kv_blocks=64)


@pytest.fixture(scope="module")
def url(llm):
    yield from api_url(llm, ApiLimits(max_prompt_tokens=128, max_tokens=32))


@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    return load_hf(tiny_model_dir)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def reference(hf, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """transformers' first ``n`` greedy tokens and its log-softmax at each of their positions
    (the engine may stop earlier than MAX_TOKENS at an end-of-sequence token)."""
    generated = hf_greedy(hf, [prompt], MAX_TOKENS)[0][:n]
    return generated, hf_logprobs(hf, prompt, generated)


def close(values: list[float], expected: torch.Tensor) -> bool:
    return torch.allclose(torch.tensor(values), expected, atol=TOLERANCE, rtol=0)


def assert_transformers_top(reported: list[tuple[str, float]], row: torch.Tensor, decode) -> None:
    """``reported``: (token text, logprob) of the top tokens at one position, best first. They are
    transformers' top ``len(reported)`` there (near-ties aside), each with transformers' logprob."""
    assert reported and [v for _, v in reported] == sorted((v for _, v in reported), reverse=True)
    candidates = row.topk(len(reported) + NEAR_TIES).indices.tolist()
    ids = {decode([i]): i for i in reversed(candidates)}  # two ids of one text: the better one
    kth_best = float(row.topk(len(reported)).values[-1])
    for token, value in reported:
        expected = float(row[ids[token]])
        assert abs(expected - value) <= TOLERANCE and expected >= kth_best - TOLERANCE, (token, value, expected)


def assert_same_top(streamed: list[list[tuple[str, float]]], whole: list[list[tuple[str, float]]]) -> None:
    """The streamed top tokens are the whole response's, with its logprobs (the second run may
    hit the prefix cache: equal up to reduction order)."""
    assert [[token for token, _ in top] for top in streamed] == [[token for token, _ in top] for top in whole]
    assert close([v for top in streamed for _, v in top], torch.tensor([v for top in whole for _, v in top]))


def test_completion_logprobs_equal_transformers_streamed_and_whole(url, llm, hf):
    kwargs = dict(model="default", prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0, logprobs=TOP)
    whole = client(url).completions.create(**kwargs).choices[0]
    lp = whole.logprobs
    generated, expected = reference(hf, PROMPT, len(lp.tokens))
    assert lp.tokens == [llm.tokenizer.decode([t]) for t in generated]
    assert close(lp.token_logprobs, expected.max(dim=-1).values)
    for position, top in enumerate(lp.top_logprobs):
        assert isinstance(top, dict) and len(top) == TOP  # greedy: the sampled token is in the top k
        assert_transformers_top(list(top.items()), expected[position], llm.tokenizer.decode)
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert "".join(lp.tokens) == whole.text
    chunks = [c.choices[0] for c in client(url).completions.create(**kwargs, stream=True)]
    parts = [c.logprobs for c in chunks if c.logprobs is not None]
    assert [t for p in parts for t in p.tokens] == lp.tokens
    assert close([v for p in parts for v in p.token_logprobs], torch.tensor(lp.token_logprobs))
    assert [o for p in parts for o in p.text_offset] == lp.text_offset
    assert_same_top([list(top.items()) for p in parts for top in p.top_logprobs],
                    [list(top.items()) for top in lp.top_logprobs])


def test_chat_logprobs_equal_transformers_streamed_and_whole(url, llm, hf):
    kwargs = dict(model="default", messages=MESSAGES, max_completion_tokens=MAX_TOKENS, temperature=0,
                  logprobs=True, top_logprobs=TOP)
    whole = client(url).chat.completions.create(**kwargs).choices[0]
    prompt = list(llm.prepare_chat(MESSAGES).token_ids)
    content = whole.logprobs.content
    generated, expected = reference(hf, prompt, len(content))
    assert [c.token for c in content] == [llm.tokenizer.decode([t]) for t in generated]
    assert close([c.logprob for c in content], expected.max(dim=-1).values)
    for position, entry in enumerate(content):
        assert len(entry.top_logprobs) == TOP
        assert close([t.logprob for t in entry.top_logprobs], expected[position].topk(TOP).values)
        assert_transformers_top(pairs(entry.top_logprobs), expected[position], llm.tokenizer.decode)
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
    chunks = list(client(url).chat.completions.create(**kwargs, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    # the second run may hit the prefix cache: same tokens, logprobs equal up to reduction order
    assert [(e.token, e.bytes) for e in streamed] == [(e.token, e.bytes) for e in content]
    assert close([e.logprob for e in streamed], torch.tensor([e.logprob for e in content]))
    assert [[t.bytes for t in e.top_logprobs] for e in streamed] == [[t.bytes for t in e.top_logprobs] for e in content]
    assert_same_top([pairs(e.top_logprobs) for e in streamed], [pairs(e.top_logprobs) for e in content])


def pairs(top_logprobs) -> list[tuple[str, float]]:
    """A chat token's ``top_logprobs`` as (token, logprob) pairs."""
    return [(t.token, t.logprob) for t in top_logprobs]


def test_chat_logprobs_without_top_give_the_sampled_token_alone(url):
    reply = client(url).chat.completions.create(model="default", messages=MESSAGES, max_completion_tokens=2,
                                                logprobs=True)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens and all(c.top_logprobs == [] for c in content)
    plain = client(url).chat.completions.create(model="default", messages=MESSAGES, max_completion_tokens=2)
    assert plain.choices[0].logprobs is None


@pytest.mark.parametrize("path, fields, param", [
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": 3}, "logprobs"),
    ("/v1/completions", {"logprobs": 21}, "logprobs"),
    ("/v1/completions", {"logprobs": -1}, "logprobs"),
    ("/v1/completions", {"logprobs": True}, "logprobs"),
])
def test_bad_logprobs_values_get_a_400_naming_the_field(url, path, fields, param):
    body = {"model": "default", "max_tokens": 2, "prompt": "hi", "messages": MESSAGES, **fields}
    response = httpx.post(f"{url}{path}", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and param in error["message"], error
