"""/metrics agrees with the engine at every moment, and the API leaves nothing behind."""
from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from serve.limits import ApiLimits
from serve.openai_api import install_api

from api_server import api_url, running_llm

TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    yield from running_llm(tiny_model_dir, max_model_len=256, num_kv_blocks=64)


@pytest.fixture(scope="module")
def url(llm):
    yield from api_url(llm, ApiLimits())


def gauge(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=TIMEOUT).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def test_waiting_gauge_counts_requests_as_soon_as_they_are_handed_over(url, llm):
    llm.pause()  # no step runs, so no record could have told the metrics
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        body = {"prompt": "hi", "max_tokens": 2, "stream": True}
        held = [client.send(client.build_request("POST", "/v1/completions", json=body), stream=True)
                for _ in range(3)]
        waiting = gauge(url, "batchscope_requests_waiting")
        running = gauge(url, "batchscope_requests_running")
        llm.resume()
        for response in held:
            response.read()
            response.close()
    assert (waiting, running) == (3, 0)


@pytest.mark.parametrize("method, path, body", [
    ("decode", "/v1/completions", {"prompt": [5, 6, 7] * 50}),  # token ids: decoded for the text
    ("encode", "/v1/completions", {"prompt": "Why do we batch requests? " * 20}),
    ("apply_chat_template", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Why do we batch requests? " * 20}]}),
], ids=["token ids", "text", "chat"])
def test_api_prompts_are_prepared_off_the_event_loop(url, llm, monkeypatch, method, path, body):
    """Tokenizing (or decoding) a long prompt takes a while: never on the server's event loop."""
    tokenizer = llm.tokenizer
    original = getattr(tokenizer, method)
    on_loop = []  # one entry per call: was an event loop running on the calling thread?

    def checked(*args, **kwargs):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return original(*args, **kwargs)

    monkeypatch.setattr(tokenizer, method, checked)
    response = httpx.post(f"{url}{path}", json={**body, "max_tokens": 2}, timeout=TIMEOUT)
    assert response.status_code == 200
    assert on_loop and not any(on_loop), on_loop


class CountingSource:
    """A record source that counts its live subscriptions."""

    state = "ready"

    def __init__(self):
        self.live = 0

    def _subscribe(self, callback):
        self.live += 1

        def unsubscribe():
            self.live -= 1

        return unsubscribe

    subscribe = subscribe_events = _subscribe

    def counts(self):
        return {"waiting": 0, "running": 0}


def test_installing_the_api_twice_on_one_engine_leaves_no_subscription_behind():
    source = CountingSource()
    for _ in range(2):
        app = FastAPI()
        install_api(app, source)
        with TestClient(app):
            assert source.live > 0
    assert source.live == 0
