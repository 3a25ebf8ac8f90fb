"""Batchscope's ingest (viz/sources/ingest.py): token, hello, validation, one engine at a time (one
producer per data-parallel rank), and the plugin's real sender streaming into it over a loopback
websocket (no vLLM needed)."""
import json
import logging

import pytest
from batchscope_vllm.sender import IngestSender
from fastapi import FastAPI, WebSocket
from ingest_receiver import wait_until
from rank_scenarios import RankSteps, rank_hello
from record_scenarios import article_step, chunked_prefill

from viz.sources.ingest import IngestSource, Refused, serve_ingest

from support.server import BackgroundServer

TOKEN = "s3cret"
HELLO = {"type": "hello", "protocol": 1, "token": TOKEN,
         "engine": {"name": "vllm", "version": "0.32.0"},
         "info": {"model": "SmolLM2", "block_size": 16, "num_kv_blocks": 8, "max_model_len": 512,
                  "phases": ["schedule", "execute", "update"],
                  "trace_header": {"engine": {"tensor_parallel_size": 1}}}}


def message(kind: str, **fields) -> str:
    return json.dumps({"type": kind, **fields})


@pytest.mark.parametrize("hello, code", [
    ({**HELLO, "token": "wrong"}, 4401),
    ({key: value for key, value in HELLO.items() if key != "token"}, 4401),
    ({**HELLO, "protocol": 2}, 4400),
    ({**HELLO, "info": {"model": "m"}}, 4400),
    ("not a hello", 4400),
])
def test_bad_hellos_are_refused_with_their_close_code(hello, code):
    source = IngestSource(TOKEN)
    with pytest.raises(Refused) as refusal:
        source.open(hello)
    assert refusal.value.code == code
    assert source.status()["state"] == "loading" and source.stats.refused == 1


def test_hello_describes_the_source_until_the_engine_goes_and_comes_back():
    source = IngestSource(TOKEN, can_fire=True)
    assert source.status()["state"] == "loading" and source.info().model == ""
    producer = source.open(HELLO)
    info = source.info()
    assert (info.engine, info.engine_version, info.model) == ("vllm", "0.32.0", "SmolLM2")
    assert info.phases == ("schedule", "execute", "update") and info.can_fire
    assert info.num_kv_blocks == 8 and info.trace_header["engine"]["tensor_parallel_size"] == 1
    assert source.status()["state"] == "ready" and source.status()["load_seconds"] is not None

    with pytest.raises(Refused) as busy:
        source.open(HELLO)  # a second engine while the first is attached
    assert busy.value.code == 4409

    producer.close()
    assert source.status()["state"] == "dead" and "disconnected" in source.status()["error"]
    source.open(HELLO)
    assert source.status() == {**source.status(), "state": "ready", "error": None}


def test_valid_records_reach_every_subscriber_and_bad_input_is_counted():
    source = IngestSource(TOKEN)
    seen, events = [], []

    def broken(record):
        raise RuntimeError("a subscriber bug")

    source.subscribe(broken)
    unsubscribe = source.subscribe(seen.append)
    source.subscribe_events(events.append)
    producer = source.open(HELLO)
    good = chunked_prefill()
    bad = {**article_step()[0], "num_rows": 7}
    for record in good:
        producer.receive(message("record", data=record))
    for text in (message("record", data=bad), "{not json", message("surprise"), None, b"\x00"):
        producer.receive(text)
    producer.receive(message("stats", dropped=5, sent=10))
    source.publish_event({"kind": "arrival", "request_id": "R"})

    assert [r["step"] for r in seen] == [r["step"] for r in good]
    assert source.stats.records == 4 and source.stats.invalid == 5
    assert "num_rows" in source.stats.last_error and source.stats.dropped_by_engine == 5
    assert source.counts() == {"waiting": 0, "running": 1}  # R, decoding in the latest record listing it
    assert events == [{"kind": "arrival", "request_id": "R"}]
    unsubscribe()
    producer.receive(message("record", data=good[0]))
    assert len(seen) == 4


def test_counts_are_what_the_cards_show_before_vllm_lists_a_request():
    """A prompt fired from the dashboard is on its card (waiting) at once; vLLM's records list it only
    from its next step. The header and /metrics count it as its card does, then follow the records."""
    source = IngestSource(TOKEN)
    producer = source.open(HELLO)
    first, *rest = chunked_prefill()
    producer.receive(message("record", data=first))
    source.publish_event({"kind": "arrival", "request_id": "D", "step": first["step"]})
    assert source.counts() == {"waiting": 1, "running": 1}  # D fired, R prefilling
    producer.receive(message("record", data={**rest[0], "requests": {
        "D": {**first["requests"]["R"], "status": "prefilling"}}}))
    assert source.counts() == {"waiting": 0, "running": 2}
    producer.receive(message("record", data={**rest[1], "finished": {"D": "stop"}}))
    assert source.counts() == {"waiting": 0, "running": 1}


def test_the_plugin_sender_streams_into_the_ingest_and_a_wrong_token_is_refused(caplog):
    caplog.set_level(logging.ERROR, logger="vllm.batchscope")
    source = IngestSource(TOKEN)
    seen: list[dict] = []
    source.subscribe(seen.append)
    app = FastAPI()

    @app.websocket("/ingest")
    async def ingest(websocket: WebSocket) -> None:
        await serve_ingest(websocket, source)

    with BackgroundServer(app) as server:
        url = server.url.replace("http://", "ws://") + "/ingest"
        intruder = IngestSender(url, {**HELLO, "token": "guess"}, backoff=(0.05, 0.1)).start()
        wait_until(lambda: source.stats.refused >= 2, "the intruder refused twice")
        intruder.close(timeout=1)
        hello = {k: v for k, v in HELLO.items() if k not in ("type", "protocol")}
        sender = IngestSender(url, hello, backoff=(0.05, 0.2)).start()
        records = chunked_prefill()
        for record in records:
            sender.submit(record)
        wait_until(lambda: len(seen) == len(records), "the records through the ingest")
        sender.close(timeout=1)
        wait_until(lambda: source.status()["state"] == "dead", "the engine's departure")
    assert intruder.connections == 0 and "refused this engine" in caplog.text
    assert [r["step"] for r in seen] == [r["step"] for r in records]
    assert source.info().model == "SmolLM2" and source.stats.invalid == 0


def test_a_restarted_engine_continues_the_step_numbers_the_views_have_seen():
    """A vLLM restarted while Batchscope runs counts its steps from 0 again; views (which skip a
    step they have already drawn) and traces (steps only grow) must see them as new steps."""
    source = IngestSource(TOKEN)
    seen: list[dict] = []
    source.subscribe(seen.append)
    first = source.open(HELLO)
    for record in chunked_prefill():  # steps 0-3
        first.receive(message("record", data=record))
    source.publish_event({"kind": "arrival", "request_id": "lost", "step": 3})
    first.close()
    second = source.open(HELLO)
    assert source.counts() == {"waiting": 0, "running": 0}  # the old engine's requests went with it
    for record in chunked_prefill()[:2]:  # steps 0-1 of the new engine
        second.receive(message("record", data=record))
    assert [r["step"] for r in seen] == [0, 1, 2, 3, 4, 5]
    assert seen[4]["segments"] == chunked_prefill()[0]["segments"]


# ---- data parallelism: one producer per rank ------------------------------------------------
def test_the_ranks_of_a_data_parallel_engine_attach_side_by_side_into_one_growing_stream():
    """vLLM with --data-parallel-size 2 runs a scheduler per rank, each streaming its own steps
    (its own numbers from 0) over its own connection: both are taken, merged in arrival order."""
    source = IngestSource(TOKEN)
    seen: list[dict] = []
    source.subscribe(seen.append)
    first, second = source.open(rank_hello(0, TOKEN)), source.open(rank_hello(1, TOKEN))
    ranks = RankSteps(0, ["a0"], waiting=["w0"]), RankSteps(1, ["b1", "c1"])
    sent = []
    for producer, rank in [(first, 0), (second, 1), (second, 1), (first, 0), (second, 1)]:
        record = ranks[rank].step()
        sent.append((rank, record["step"]))
        producer.receive(message("record", data=record))
    assert [r["step"] for r in seen] == [0, 1, 2, 3, 4]
    assert [(r["source"]["data_parallel_rank"], r["source"]["rank_step"]) for r in seen] == sent
    status = source.status()
    assert status["state"] == "ready" and source.stats.connections == 2
    assert status["data_parallel"] == {"size": 2, "ranks": [{"rank": 0, "waiting": 1, "running": 1},
                                                            {"rank": 1, "waiting": 0, "running": 2}]}
    assert source.counts() == {"waiting": 1, "running": 3}


def test_a_rank_already_attached_another_engine_or_a_rank_out_of_range_is_refused():
    source = IngestSource(TOKEN)
    source.open(rank_hello(0, TOKEN))
    refusals = []
    for hello in (rank_hello(0, TOKEN), rank_hello(1, TOKEN, model="another"),
                  rank_hello(1, TOKEN, version="0.33.0"), rank_hello(1, TOKEN, size=4), HELLO,
                  rank_hello(2, TOKEN), rank_hello(-1, TOKEN)):
        with pytest.raises(Refused) as refusal:
            source.open(hello)
        refusals.append((refusal.value.code, refusal.value.reason))
    assert [code for code, _ in refusals] == [4409, 4409, 4409, 4409, 4409, 4400, 4400]
    assert "rank 0" in refusals[0][1] and "already attached" in refusals[0][1]
    assert all("another engine is attached: vllm 0.32.0 (SmolLM2, data parallel 2)" in reason
               for _, reason in refusals[1:5])
    assert "data_parallel_rank 2 is not in 0..1" in refusals[5][1]
    assert "data_parallel_rank -1 is not in 0..1" in refusals[6][1]
    assert source.stats.refused == 7 and source.stats.connections == 1
    source.open(rank_hello(1, TOKEN))  # the engine's other rank still attaches
    assert [r["rank"] for r in source.status()["data_parallel"]["ranks"]] == [0, 1]


def test_ranks_that_do_not_know_the_size_attach_as_one_engine_sized_by_the_ranks_seen():
    """vLLM's engine core of a dense model runs each data-parallel rank as an engine of its own
    (its config says size 1), so the plugin's hello names the rank and no size."""
    source = IngestSource(TOKEN)
    seen: list[dict] = []
    source.subscribe(seen.append)
    first = source.open(rank_hello(0, TOKEN, size=None))
    first.receive(message("record", data=RankSteps(0, ["a0"]).step()))
    assert "data_parallel" not in source.status() and "rank_step" not in seen[0]["source"]
    second = source.open(rank_hello(1, TOKEN, size=None))
    second.receive(message("record", data=RankSteps(1, ["b1"]).step()))
    assert seen[1]["source"]["rank_step"] == 0 and seen[1]["source"]["data_parallel_rank"] == 1
    assert source.status()["data_parallel"]["size"] == 2
    with pytest.raises(Refused) as refusal:
        source.open(rank_hello(1, TOKEN, size=None))
    assert "data-parallel rank 1" in refusal.value.reason and "already attached" in refusal.value.reason


def test_the_source_stays_ready_while_a_rank_is_attached():
    source = IngestSource(TOKEN)
    first, second = source.open(rank_hello(0, TOKEN)), source.open(rank_hello(1, TOKEN))
    second.close()
    status = source.status()
    assert status["state"] == "ready" and [r["rank"] for r in status["data_parallel"]["ranks"]] == [0]
    first.close()
    status = source.status()
    assert status["state"] == "dead" and "disconnected" in status["error"] and "data_parallel" not in status
    source.open(rank_hello(1, TOKEN))
    assert source.status()["state"] == "ready"


def test_a_record_without_its_rank_takes_the_one_its_connection_said_hello_with():
    source = IngestSource(TOKEN)
    seen: list[dict] = []
    source.subscribe(seen.append)
    producer = source.open(rank_hello(1, TOKEN))
    record = RankSteps(1, ["b1"]).step()
    source_fields = {k: v for k, v in record["source"].items() if k != "data_parallel_rank"}
    producer.receive(message("record", data={**record, "source": source_fields}))
    assert seen[0]["source"]["data_parallel_rank"] == 1 and seen[0]["source"]["rank_step"] == 0


def test_a_rank_that_comes_back_continues_the_steps_and_forgets_only_its_own_requests():
    source = IngestSource(TOKEN)
    seen: list[dict] = []
    source.subscribe(seen.append)
    first, second = source.open(rank_hello(0, TOKEN)), source.open(rank_hello(1, TOKEN))
    rank0, rank1 = RankSteps(0, ["a0"]), RankSteps(1, ["b1", "c1"])
    for producer, rank in [(first, rank0), (second, rank1), (first, rank0)]:
        producer.receive(message("record", data=rank.step()))
    second.close()  # rank 1's engine core restarts: its steps count from 0 again
    second = source.open(rank_hello(1, TOKEN))
    assert source.counts() == {"waiting": 0, "running": 1}  # a0 only: b1 and c1 went with rank 1
    second.receive(message("record", data=RankSteps(1, ["d1"]).step()))
    dropped = rank0.step(), rank0.step(), rank0.step()  # rank 0's queue drops the first two
    first.receive(message("record", data=dropped[2]))
    assert [r["step"] for r in seen] == [0, 1, 2, 3, 6]
    assert [r["source"]["rank_step"] for r in seen] == [0, 0, 1, 0, 4]


def test_an_engine_with_one_rank_keeps_its_own_step_numbers_and_says_no_ranks():
    source = IngestSource(TOKEN)
    seen: list[dict] = []
    source.subscribe(seen.append)
    producer = source.open(rank_hello(0, TOKEN, size=1))
    for record in chunked_prefill():
        producer.receive(message("record", data=record))
    assert [r["step"] for r in seen] == [r["step"] for r in chunked_prefill()]
    assert all("rank_step" not in r["source"] for r in seen) and "data_parallel" not in source.status()


def test_metrics_kv_gauges_add_up_the_pools_of_every_rank():
    """Each data-parallel rank has its own KV pool: /metrics shows the engine's, their sum, not
    whichever rank sent the last record."""
    from serve.metrics import EngineMetrics

    source = IngestSource(TOKEN)
    metrics = EngineMetrics(source)
    first, second = source.open(rank_hello(0, TOKEN)), source.open(rank_hello(1, TOKEN))
    zero, one = RankSteps(0, ["a0"]), RankSteps(1, ["b1", "c1"])
    first.receive(message("record", data=(a := zero.step())))
    second.receive(message("record", data=(b := one.step())))
    free = a["kv"]["num_free"] + b["kv"]["num_free"]
    total = a["kv"]["num_blocks"] + b["kv"]["num_blocks"]
    text = metrics.exposition().decode()
    assert f"batchscope_kv_blocks_free {float(free)}" in text
    assert f"batchscope_kv_blocks_total {float(total)}" in text
