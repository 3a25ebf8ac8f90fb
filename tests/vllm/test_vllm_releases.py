"""The tap against every supported vLLM release's real Scheduler and AsyncScheduler, driven on this
CPU as vLLM's own unit tests drive them (scheduler_driver.py: fake runner outputs, the engine
core's batch queue, two steps in flight with async scheduling), one venv per release
(`make vllm-scheduler-install VLLM=0.34.0`; a release whose venv is missing is skipped, saying
so). Each check holds the records against what the scheduler and the fake runner did."""
from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from vllm_env import HERE, PLUGIN_DIR, scheduler_python

RELEASES = ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
MODES = ("sync", "async")
LIMIT_S = 300


@cache
def drive(release: str, mode: str, out_dir: Path) -> dict:
    from engine.loader import resolve_model_dir

    python = scheduler_python(release)
    out = out_dir / f"{release}-{mode}.json"
    env = {**os.environ, "PYTHONPATH": f"{PLUGIN_DIR}{os.pathsep}{HERE}",
           "VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_LOGGING_LEVEL": "WARNING"}
    command = [str(python), str(HERE / "scheduler_driver.py"),
               str(resolve_model_dir("default")[1]), str(out), mode]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=LIMIT_S,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module", params=[(r, m) for r in RELEASES for m in MODES],
                ids=lambda p: f"{p[0]}-{p[1]}")
def run(request, tmp_path_factory) -> dict:
    release, mode = request.param
    return drive(release, mode, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module", params=RELEASES)
def async_run(request, tmp_path_factory) -> dict:
    return drive(request.param, "async", tmp_path_factory.getbasetemp())


def test_the_release_runs_its_own_adapter_and_says_how_it_schedules(run):
    mode = "async" if run["scheduler"] == "AsyncScheduler" else "sync"
    assert run["adapter"] == ".".join(run["version"].split(".")[:2])
    for record in run["records"]:
        assert record["source"]["adapter"] == run["adapter"]
        assert record["source"]["scheduling"] == mode
        assert record["source"]["data_parallel_rank"] == 0


def test_every_record_validates(run):
    from engine.telemetry import validate_record

    for record in run["records"]:
        validate_record(record)


def test_one_record_per_step_with_the_rows_blocks_and_order_of_that_step(run):
    records, steps = run["records"], run["steps"]
    assert [r["step"] for r in records] == list(range(len(steps)))
    for record, step in zip(records, steps, strict=True):
        assert record["num_rows"] == step["total"]
        assert {s["request_id"]: s["num_rows"] for s in record["segments"]} == step["num_scheduled"]
        assert [s["request_id"] for s in record["segments"]] == step["order"]
        assert record["block_tables"] == step["tables"], record["step"]


def test_the_runners_batch_order_decodes_then_short_extends_then_prefills(run):
    """The fake runner packs rows as vLLM 0.34's V2 runner (``sort_batch_req_ids``); the
    records' segments and cu_seqlens_q follow it, not the scheduler's order."""
    reordered = 0
    for record, step in zip(run["records"], run["steps"], strict=True):
        rows = [s["num_rows"] for s in record["segments"]]
        assert rows == sorted(rows, key=lambda n: (n != 1, n))
        reordered += [s["request_id"] for s in record["segments"]] != list(step["num_scheduled"])
    assert reordered, "no step was packed out of the scheduler's order: the check proves nothing"


def test_a_step_packs_a_prefill_with_decodes(run):
    assert any({"decode"} < {s["kind"] for s in r["segments"]} for r in run["records"])


def test_each_finish_is_reported_once_and_sampled_tokens_are_what_the_runner_kept(run):
    finished = Counter(rid for r in run["records"] for rid in r["finished"])
    assert set(finished) == set(run["requests"]) and set(finished.values()) == {1}
    abort_rid = run["abort"][0]
    for record, step in zip(run["records"], run["steps"], strict=True):
        kept = {rid: tok for rid, tok in step["sampled"].items()
                if not _discarded(record, rid)}
        assert record["sampled"] == kept, record["step"]
    outputs = Counter(rid for r in run["records"] for rid in r["sampled"])
    for rid, (_, max_tokens, _) in run["requests"].items():
        if rid != abort_rid:
            assert outputs[rid] == max_tokens, rid


def test_a_preempted_request_is_resumed_as_a_prefill_of_prompt_and_outputs(run):
    records = run["records"]
    at = next(i for i, r in enumerate(records) if r["preempted"])
    rid = records[at]["preempted"][0]
    assert records[at]["requests"][rid]["status"] == "preempted"
    back = next(r for r in records[at + 1:] if rid in r["admitted"])
    segment = next(s for s in back["segments"] if s["request_id"] == rid)
    state = back["requests"][rid]
    assert segment["kind"] in ("prefill", "prefill_chunk")
    assert state["prefill_target"] >= state["num_prompt_tokens"]
    assert segment["num_cached"] == back["admitted"][rid]
    step = run["steps"][back["step"]]
    resumed_as_new = tuple(map(int, run["adapter"].split("."))) >= (0, 34)  # sent in full again
    assert (rid in step["new"], rid in step["resumed"]) == (resumed_as_new, not resumed_as_new)


def test_an_abort_while_its_step_is_in_flight_is_reported_and_its_rows_discarded(run):
    rid, at = run["abort"]
    records = run["records"]
    assert records[at]["aborted"] == [rid] and records[at]["finished"] == {rid: "abort"}
    discarded = [r["step"] for r in records if _discarded(r, rid)]
    in_flight = 2 if run["scheduler"] == "AsyncScheduler" else 1
    assert discarded == list(range(at, at + in_flight))
    assert all(rid not in r["sampled"] and rid not in r["requests"] for r in records[at + in_flight:])
    freed = records[at + in_flight]
    assert rid not in freed["block_tables"] and rid not in (freed["kv"]["owners"] or [])


def test_async_scheduling_keeps_two_steps_in_flight(async_run):
    """schedule() of step N+1 runs before update_from_output() of N, and the records say so:
    consecutive steps overlap in time."""
    events = [tuple(e[:2]) for e in async_run["events"] if e[0] != "abort"]
    overlapped = [n for n in range(len(async_run["steps"]) - 1)
                  if events.index(("schedule", n + 1)) < events.index(("update", n))]
    assert len(overlapped) > len(async_run["steps"]) // 2
    records = async_run["records"]
    assert any(b["t_start"] < a["t_end"] for a, b in zip(records, records[1:]))
    for record in records:
        durations = record["durations_ms"]
        assert durations["schedule"] + durations["execute"] + durations["update"] <= durations["total"] + 1e-3


def test_queue_counts_are_the_records_own_request_states(run):
    for record in run["records"]:
        statuses = Counter(s["status"] for s in record["requests"].values())
        assert record["num_running"] == statuses["prefilling"] + statuses["decoding"]
        assert record["num_waiting"] == statuses["waiting"] + statuses["preempted"]


def _discarded(record: dict, rid: str) -> bool:
    return any(s["request_id"] == rid and s.get("discarded") for s in record["segments"])
