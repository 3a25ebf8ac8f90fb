"""Surviving clients that vanish and steps that fail, seen through the API and /metrics."""
from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from fastapi import FastAPI

from engine import AsyncLLM
from serve.limits import ApiLimits
from serve.openai_api import install_api

from api_server import api_url, running_llm
from support.faults import fail_next_forward

COMPLETIONS = "/v1/completions"
TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    yield from running_llm(tiny_model_dir, max_model_len=256, num_kv_blocks=32, max_num_seqs=2)


@pytest.fixture(scope="module")
def url(llm):
    yield from api_url(llm, ApiLimits(max_tokens=200))


@pytest.fixture(autouse=True)
def restore_speed(llm):
    yield
    llm.resume()
    llm.set_min_step_interval(0)


def gauges(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
    return {name: float(value) for name, value in
            (line.split() for line in text.splitlines() if line and not line.startswith("#"))
            if not name.endswith("_created")}


def wait_idle(url: str, within: float = 1.0) -> dict[str, float]:
    """Poll /metrics until nothing runs and every block is free; return the last sample."""
    deadline = time.monotonic() + within
    while True:
        sample = gauges(url)
        idle = (sample["batchscope_requests_running"] == 0 and sample["batchscope_requests_waiting"] == 0
                and sample["batchscope_kv_blocks_free"] == sample["batchscope_kv_blocks_total"])
        if idle or time.monotonic() > deadline:
            return sample
        time.sleep(0.02)


def assert_idle(url: str, llm: AsyncLLM) -> None:
    sample = wait_idle(url)
    assert sample["batchscope_requests_running"] == 0, sample
    assert sample["batchscope_kv_blocks_free"] == sample["batchscope_kv_blocks_total"], sample
    assert llm.engine.block_manager.num_free == llm.engine.config.num_kv_blocks


def stream(client: httpx.Client, max_tokens: int = 200) -> httpx.Response:
    body = {"prompt": "The longest story ever told", "max_tokens": max_tokens, "stream": True}
    return client.send(client.build_request("POST", COMPLETIONS, json=body), stream=True)


def events(response: httpx.Response) -> list[str]:
    return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]


def test_client_dropping_a_stream_frees_its_blocks_within_a_second(url, llm):
    llm.set_min_step_interval(0.02)
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        response = stream(client)
        chunks = (line for line in response.iter_lines() if line.startswith("data: "))
        assert [json.loads(next(chunks)[6:])["choices"][0]["finish_reason"] for _ in range(2)] == [None, None]
        assert gauges(url)["batchscope_requests_running"] == 1
        response.close()  # drops the connection mid-stream
    assert_idle(url, llm)
    assert gauges(url)['batchscope_requests_finished_total{finish_reason="abort"}'] >= 1


def test_client_dropping_while_the_engine_is_paused(url, llm):
    llm.pause()  # no step runs, so nothing is sent that could notice the disconnect
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        response = stream(client)
        assert response.status_code == 200
        response.close()
    assert_idle(url, llm)


def test_client_giving_up_on_a_non_streaming_request(url, llm):
    llm.set_min_step_interval(0.02)
    body = {"prompt": "Tell me everything", "max_tokens": 200}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}{COMPLETIONS}", json=body, timeout=httpx.Timeout(30.0, read=0.3))
    assert_idle(url, llm)


def test_a_failed_step_fails_only_its_requests_and_the_next_ones_succeed(url, llm):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
    errors_before = gauges(url).get('batchscope_requests_finished_total{finish_reason="error"}', 0)
    llm.pause()
    with httpx.Client(base_url=url, timeout=TIMEOUT) as http:
        # max_num_seqs=2: the first two arrivals share the failing step, the third waits it out
        in_step = [client.completions.create(model="default", prompt="a", max_tokens=5, stream=True),
                   stream(http, max_tokens=5)]
        waiting = stream(http, max_tokens=5)
        fail_next_forward(llm, RuntimeError("boom"))
        llm.resume()
        with pytest.raises(openai.APIError, match="RuntimeError: boom"):
            list(in_step[0])
        failed = json.loads(events(in_step[1])[0])["error"]
        survivor = events(waiting)
    assert failed["type"] == "server_error" and "boom" in failed["message"]
    assert survivor[-1] == "[DONE]" and json.loads(survivor[-2])["choices"][0]["finish_reason"] == "length"

    fail_next_forward(llm, MemoryError("out of memory"))  # the next step is this request's alone
    response = httpx.post(f"{url}{COMPLETIONS}", json={"prompt": "b", "max_tokens": 5}, timeout=TIMEOUT)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error" and "MemoryError: out of memory" in error["message"]

    after = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=4)
    assert after.choices[0].finish_reason in ("stop", "length")
    sample = gauges(url)
    assert sample["batchscope_step_errors_total"] == 2
    assert sample['batchscope_requests_finished_total{finish_reason="error"}'] == errors_before + 3
    assert_idle(url, llm)


def test_a_request_the_engine_refuses_gives_back_its_admission(llm, monkeypatch):
    from fastapi.testclient import TestClient

    def stopped(*args, **kwargs):
        raise RuntimeError("the engine is stopped")

    app = FastAPI()
    install_api(app, llm, ApiLimits(max_concurrent_per_client=1, max_waiting=1))
    monkeypatch.setattr(llm, "add_request", stopped)
    with TestClient(app, raise_server_exceptions=False) as client:
        for _ in range(3):  # a leaked slot would turn the second into a 429
            response = client.post(COMPLETIONS, json={"prompt": "a", "max_tokens": 2})
            assert response.status_code == 500
