"""The plugin in vLLM as it is deployed: vLLM's OpenAI server (not the offline LLM), fired at by
streaming clients over HTTP, one of which hangs up mid-stream. The KV pool is kept small (16
blocks of 32 tokens) so that four long requests cannot all stay: vLLM preempts and resumes.
The records the plugin streamed to a loopback receiver are held against vLLM's own account of
the run: its scheduler's (audit_scheduler.py) and its model runner's (audit_worker.py).

Runs vLLM from ``BATCHSCOPE_VLLM_PYTHON`` when set (`make vllm-matrix` points it at each CPU
build's venv, .venv-vllm-0.30.0, ...), else from .venv-vllm. About two minutes on 2 cores, most
of it vLLM's start.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from audit_checks import check_packed, check_scheduled, mixed_steps, read_lines
from ingest_receiver import Receiver, wait_until
from vllm_env import HERE, PLUGIN_DIR, served_python, venv_release

sys.path.insert(0, str(PLUGIN_DIR))
import launch  # noqa: E402

from engine.telemetry import validate_record  # noqa: E402

TOKEN = "served-integration-token"
START_LIMIT = 480  # seconds for vLLM to load; 50-90 s on 2 cores
NUM_BLOCKS, BLOCK_SIZE = 16, 32
STAYERS, MAX_TOKENS = 4, 80  # ~100-token prompts: 6 blocks each at the end, 15 in the pool
LEAVER_CHUNKS = 3  # the leaver reads this many streamed chunks, then hangs up
STORY = ("Continuous batching packs the new tokens of every running request into one forward "
         "pass: a prefill of a fresh prompt beside the decodes of requests already running, "
         "each attending only to its own keys and values through its block table. ")


@dataclass
class Served:
    release: str
    hello: dict
    records: list[dict]
    audit: list[dict]
    packed: list[dict]
    stayers: list[dict]  # per streaming client: tokens received and the finish reason
    leaver_tokens: int


def stream(url: str, prompt: str, max_tokens: int, result: dict, hang_up_after: int | None = None) -> None:
    body = {"model": launch.SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "temperature": 0}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=300) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = json.loads(line[6:])["choices"][0]
            result["chunks"] += 1
            result["finish"] = choice.get("finish_reason") or result["finish"]
            if result["chunks"] == hang_up_after:
                return  # leaving the block closes the connection: a real client disconnect


def fire(url: str) -> tuple[list[dict], dict]:
    """``STAYERS`` long streamed completions and one that hangs up after ``LEAVER_CHUNKS``."""
    stayers = [{"chunks": 0, "finish": None} for _ in range(STAYERS)]
    leaver = {"chunks": 0, "finish": None}
    jobs = [(f"Request {k}. {STORY * 2}Explain it again:", MAX_TOKENS, r, None) for k, r in enumerate(stayers)]
    jobs.append(("Count slowly from one to a thousand:", 400, leaver, LEAVER_CHUNKS))
    threads = [threading.Thread(target=stream, args=(url, *job), daemon=True) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return stayers, leaver


def idle_and_recorded(records: list[dict], audit: Path) -> bool:
    """vLLM ran its closing step (after the last finish it schedules once more, with nothing to
    run, to tell the workers) and every step it scheduled has its record. The clients have their
    last tokens before that step is scheduled, so stopping vLLM then would cut it off."""
    return bool(records) and not records[-1]["block_tables"] and len(records) >= len(audit.read_text().splitlines())


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Served:
    python = served_python()
    tmp = tmp_path_factory.mktemp("served")
    audit, packed = tmp / "audit.jsonl", tmp / "packed{rank}.jsonl"
    with Receiver(token=TOKEN) as receiver:
        vllm = launch.start_vllm(
            launch.default_model_dir(), launch.free_port(), tmp / "vllm.log",
            "--max-num-batched-tokens", "64", "--max-num-seqs", "8", "--block-size", str(BLOCK_SIZE),
            "--num-gpu-blocks-override", str(NUM_BLOCKS), "--max-model-len", str(NUM_BLOCKS * BLOCK_SIZE - 64),
            "--scheduler-cls", "audit_scheduler.AuditScheduler", "--worker-cls", "audit_worker.AuditWorker",
            ingest_url=receiver.url, token=TOKEN, python=python, cwd=tmp,
            env={"BATCHSCOPE_AUDIT": str(audit), "BATCHSCOPE_AUDIT_ROWS": str(packed),
                 "PYTHONPATH": f"{PLUGIN_DIR}{os.pathsep}{HERE}"})
        try:
            vllm.wait_healthy("/health", START_LIMIT)
            stayers, leaver = fire(vllm.url)
            wait_until(lambda: idle_and_recorded(receiver.records, audit),
                       "vLLM's closing step (nothing scheduled) and a record of every step it scheduled", 60)
        finally:
            vllm.stop()
    (tmp / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receiver.records))
    return Served(venv_release(python.parents[1]), receiver.hellos[0], receiver.records,
                  read_lines(audit), read_lines(Path(str(packed).format(rank=0))), stayers,
                  leaver["chunks"])


def test_the_served_engine_is_the_release_under_test_and_every_record_validates(served):
    assert served.hello["engine"]["version"] == served.release
    assert {r["source"]["adapter"] for r in served.records} == {".".join(served.release.split(".")[:2])}
    assert {r["source"]["scheduling"] for r in served.records} == {"sync"}  # CPU: never async
    for record in served.records:
        validate_record(record)


def test_records_are_what_the_scheduler_scheduled_in_the_runners_packed_order(served):
    check_scheduled(served.records, served.audit)
    check_packed(served.records, served.packed)
    assert mixed_steps(served.records), "no step packed a prefill with decodes"


def test_every_staying_client_got_all_its_tokens_as_the_records_sampled_them(served):
    assert served.stayers == [{"chunks": MAX_TOKENS, "finish": "length"}] * STAYERS
    finished = {rid: why for r in served.records for rid, why in r["finished"].items()}
    sampled: dict[str, int] = {}
    for record in served.records:
        for rid in record["sampled"]:
            sampled[rid] = sampled.get(rid, 0) + 1
    assert sorted(n for rid, n in sampled.items() if finished.get(rid) == "length") == [MAX_TOKENS] * STAYERS


def test_a_full_pool_preempts_and_the_request_resumes_as_a_prefill(served):
    preempted = [(r["step"], rid) for r in served.records for rid in r["preempted"]]
    assert preempted, "the 16-block pool should not hold four long requests"
    for step, rid in preempted:
        later = [r for r in served.records if r["step"] > step and rid in r["admitted"]]
        assert later, f"{rid}, preempted at step {step}, never came back"
        [resumed] = [s for s in later[0]["segments"] if s["request_id"] == rid]
        assert resumed["kind"] in ("prefill", "prefill_chunk")
        assert later[0]["requests"][rid]["prefill_target"] > resumed["num_prompt_tokens"]  # outputs too


def test_a_client_hanging_up_aborts_its_request_and_its_blocks_come_back(served):
    assert LEAVER_CHUNKS <= served.leaver_tokens < 400
    [(step, rid)] = [(r["step"], rid) for r in served.records for rid in r["aborted"]]
    assert served.records[step]["requests"][rid]["status"] == "finished"
    after = [r for r in served.records if r["step"] > step]
    assert all(rid not in r["block_tables"] and rid not in r["kv"]["owners"] for r in after)
    last = served.records[-1]["kv"]
    assert last["num_free"] == last["num_blocks"] - 1  # all but vLLM's null block


@dataclass
class DataParallel:
    hellos: list[dict]
    records: list[dict]
    finished: int  # streamed completions that ran to their length


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory) -> DataParallel:
    """vLLM's OpenAI server with ``--data-parallel-size 2``: two engine cores (one per core of
    this machine), each with its own scheduler, tap and connection; vLLM's front end spreads the
    requests over them."""
    python = served_python()
    tmp = tmp_path_factory.mktemp("data_parallel")
    with Receiver(token=TOKEN) as receiver:
        vllm = launch.start_vllm(
            launch.default_model_dir(), launch.free_port(), tmp / "vllm.log", "--data-parallel-size", "2",
            "--max-num-batched-tokens", "64", "--block-size", str(BLOCK_SIZE),
            ingest_url=receiver.url, token=TOKEN, python=python, cwd=tmp,
            env={"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_KVCACHE_SPACE": "1"})
        try:
            vllm.wait_healthy("/health", START_LIMIT)
            results = [{"chunks": 0, "finish": None} for _ in range(6)]
            threads = [threading.Thread(target=stream, args=(vllm.url, f"Request {k}. {STORY}", 16, r), daemon=True)
                       for k, r in enumerate(results)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
            sampled = lambda: sum(len(r["sampled"]) for r in receiver.records)  # noqa: E731
            wait_until(lambda: sampled() >= 6 * 16, "a record of every sampled token", 60)
        finally:
            vllm.stop()
    return DataParallel(receiver.hellos, receiver.records, sum(r["finish"] == "length" for r in results))


def test_two_data_parallel_ranks_each_stream_their_own_steps(data_parallel):
    assert data_parallel.finished == 6
    assert sorted(h["engine"]["data_parallel_rank"] for h in data_parallel.hellos) == [0, 1]
    by_rank: dict[int, list[dict]] = {}
    for record in data_parallel.records:
        validate_record(record)
        by_rank.setdefault(record["source"]["data_parallel_rank"], []).append(record)
    assert sorted(by_rank) == [0, 1]
    for records in by_rank.values():  # each rank numbers its own steps
        assert [r["step"] for r in records] == list(range(len(records)))
    ran = {rank: {s["request_id"] for r in records for s in r["segments"]} for rank, records in by_rank.items()}
    assert ran[0] and ran[1] and not ran[0] & ran[1]  # vLLM's front end spread the requests
    assert len(ran[0] | ran[1]) == 6
