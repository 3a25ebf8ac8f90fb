"""An engine thread that dies is seen everywhere: its state, new requests, open streams, /healthz.
And a step that crashes (the engine keeps serving) spares the requests still on their way in."""
from __future__ import annotations

import json

import httpx
import pytest

from engine import SamplingParams
from serve.limits import ApiLimits

from api_server import api_url, running_llm
from support.faults import kill_on_next_step

TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture
def doomed_llm(tiny_model_dir):
    yield from running_llm(tiny_model_dir, num_kv_blocks=64, max_model_len=256)


def test_a_dead_engine_fails_open_streams_and_refuses_new_requests(doomed_llm, monkeypatch):
    llm = doomed_llm
    llm.pause()
    stream = llm.add_request([5, 6], SamplingParams(max_tokens=5))
    kill_on_next_step(llm, monkeypatch)
    llm.resume()
    out = stream.collect()
    assert out.finish_reason == "error" and "the engine thread was killed" in out.error
    assert llm.state == "dead" and "the engine thread was killed" in llm.error
    assert llm.status()["state"] == "dead"
    from engine import EngineDeadError

    with pytest.raises(EngineDeadError, match="the engine thread was killed"):
        llm.add_request([5, 6])
    with pytest.raises(EngineDeadError):
        llm.prepare("hello")


def test_a_dead_engine_shows_in_healthz_and_ends_api_streams(doomed_llm, monkeypatch):
    llm = doomed_llm
    server = api_url(llm, ApiLimits())
    url = next(server)
    llm.pause()
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        body = {"prompt": "Once upon a time", "max_tokens": 8, "stream": True}
        with client.stream("POST", "/v1/completions", json=body) as response:
            kill_on_next_step(llm, monkeypatch)
            llm.resume()
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        health = client.get("/healthz")
        refused = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    server.close()
    assert events[-1] == "[DONE]" and "the engine thread was killed" in json.loads(events[-2])["error"]["message"]
    assert health.status_code == 503
    assert health.json()["status"] == "dead" and "the engine thread was killed" in health.json()["error"]
    assert refused.status_code == 503 and "the engine thread was killed" in refused.json()["error"]["message"]


def test_a_step_crash_spares_requests_still_in_the_inbox(doomed_llm, monkeypatch):
    """A request added while the crashing step runs is still in the inbox when live requests
    are failed: it must either run with its listener or never run, not run unheard."""
    llm = doomed_llm
    original = llm.engine.step
    late = {}

    def crash_once():
        if not late:
            late["stream"] = llm.add_request([8, 9], SamplingParams(max_tokens=3, ignore_eos=True))
            raise KeyError("bug")
        return original()

    monkeypatch.setattr(llm.engine, "step", crash_once)
    ran = []
    unsubscribe = llm.subscribe(lambda r: ran.extend(s["request_id"] for s in r["segments"]))
    failed = llm.add_request([5, 6, 7], SamplingParams(max_tokens=3)).collect()
    after = late["stream"].collect()
    unsubscribe()
    assert failed.finish_reason == "error"
    assert after.finish_reason == "length" and len(after.token_ids) == 3
    assert after.request_id in ran

