"""The vLLM plugin's record builder on hand-made scheduler steps (no vLLM needed)."""
import json

import pytest
from batchscope_vllm.records import (
    MAX_SHIPPED_BLOCKS,
    Admission,
    EngineSettings,
    KVSnapshot,
    LiveRequest,
    OwnerTracker,
    RecordBuilder,
    ScheduledStep,
    StepOutcome,
)

LARGE = MAX_SHIPPED_BLOCKS + 1
SETTINGS = EngineSettings(version="0.32.0", policy="vllm-fcfs", token_budget=256,
                          chunked_prefill=True)


def small_pool(num_blocks=8, owners=None) -> KVSnapshot:
    refs = [1] + [0] * (num_blocks - 1)  # block 0: vLLM's null block
    owners = owners or {}
    for block_id in owners:
        refs[block_id] = 1
    return KVSnapshot(num_blocks, 16, refs.count(0), 0, refs,
                      [owners.get(b) for b in range(num_blocks)], [])


def scheduled(rows: dict[str, tuple[int, int, int]], *, admitted=None, preempted=(),
              kv=None) -> ScheduledStep:
    """rows: request id -> (scheduled tokens, computed before, prompt tokens), scheduler order."""
    return ScheduledStep(
        t_start=100.0, schedule_ms=0.5,
        num_scheduled={rid: r[0] for rid, r in rows.items()},
        num_computed={rid: r[1] for rid, r in rows.items()},
        num_prompt_tokens={rid: r[2] for rid, r in rows.items()},
        block_tables={rid: [1 + i] for i, rid in enumerate(rows)},
        kv=kv or small_pool(), admitted=admitted or {}, preempted=list(preempted))


def outcome(order=None, *, sampled=None, finished=None, requests=None, aborted=()) -> StepOutcome:
    return StepOutcome(t_end=100.01, execute_ms=8.0, update_ms=0.5, row_order=order,
                       sampled=sampled or {}, finished=finished or {}, aborted=list(aborted),
                       requests=requests or {}, num_waiting=0, num_running=3)


def article_step() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    step = scheduled({"C": (100, 0, 100), "A": (1, 500, 480), "B": (1, 200, 190)},
                     admitted={"C": Admission(0, 100)})
    return [builder.build(step, outcome(["A", "B", "C"], sampled={"A": 7, "B": 8, "C": 9}))]


def test_article_step_packs_two_decodes_and_a_prefill_in_runner_order():
    record, = article_step()

    assert [(s["request_id"], s["kind"]) for s in record["segments"]] == [
        ("A", "decode"), ("B", "decode"), ("C", "prefill")]
    assert record["cu_seqlens_q"] == [0, 1, 2, 102]
    assert record["seq_lens_k"] == [501, 201, 100]
    assert record["num_rows"] == 102 and record["padded_rows"] == 300
    assert record["source"] == {"engine": "vllm", "version": "0.32.0", "row_order": "packed"}
    assert record["admitted"] == {"C": 0}


def packed_then_fallback() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    step = scheduled({"B": (4, 0, 4), "A": (1, 9, 5)}, admitted={"B": Admission(0, 4)})
    packed = builder.build(step, outcome(["A", "idle", "B"]))
    return [packed, builder.build(step, outcome(["A"]))]  # the runner's list misses B


def test_runner_rows_skip_idle_batch_members_and_fall_back_to_scheduler_order():
    packed, fallback = packed_then_fallback()
    assert [s["request_id"] for s in packed["segments"]] == ["A", "B"]
    assert packed["source"]["row_order"] == "packed"
    assert [s["request_id"] for s in fallback["segments"]] == ["B", "A"]
    assert fallback["source"]["row_order"] == "scheduled"
    assert (packed["step"], fallback["step"]) == (0, 1)


def chunked_prefill() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    first = builder.build(scheduled({"R": (64, 32, 200)}, admitted={"R": Admission(32, 200)}),
                          outcome(["R"], requests={"R": LiveRequest("running", 200, 96, 0)}))
    middle = builder.build(scheduled({"R": (64, 96, 200)}), outcome(["R"]))
    last = builder.build(scheduled({"R": (40, 160, 200)}),
                         outcome(["R"], sampled={"R": 5},
                                 requests={"R": LiveRequest("running", 200, 200, 1)}))
    decode = builder.build(scheduled({"R": (1, 200, 200)}), outcome(["R"], sampled={"R": 6}))
    return [first, middle, last, decode]


def test_chunked_prefill_after_a_prefix_hit_then_decode():
    first, middle, last, decode = chunked_prefill()
    kinds = [r["segments"][0]["kind"] for r in (first, middle, last, decode)]
    assert kinds == ["prefill_chunk", "prefill_chunk", "prefill_chunk", "decode"]
    assert first["segments"][0]["num_cached"] == 32 and first["admitted"] == {"R": 32}
    assert first["requests"]["R"]["status"] == "prefilling"
    assert last["requests"]["R"]["status"] == "decoding"
    assert last["segments"][0]["sampled"] and not middle["segments"][0]["sampled"]


def test_prefix_hit_then_whole_rest_in_one_step_is_a_prefill():
    builder = RecordBuilder(SETTINGS)
    record = builder.build(scheduled({"R": (72, 128, 200)}, admitted={"R": Admission(128, 200)}),
                           outcome(["R"]))
    assert record["segments"][0]["kind"] == "prefill"
    assert record["segments"][0]["num_keys"] == 200


def preempt_and_resume() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    builder.build(scheduled({"R": (10, 0, 10)}, admitted={"R": Admission(0, 10)}), outcome(["R"]))
    preempted = builder.build(scheduled({}, preempted=["R"]),
                              outcome([], requests={"R": LiveRequest("preempted", 10, 0, 3)}))
    resumed = builder.build(scheduled({"R": (13, 0, 10)}, admitted={"R": Admission(0, 13)}),
                            outcome(["R"], requests={"R": LiveRequest("running", 10, 13, 3)}))
    return [preempted, resumed]


def test_resumed_request_recomputes_prompt_and_outputs_as_a_prefill():
    preempted, resumed = preempt_and_resume()
    assert preempted["preempted"] == ["R"] and preempted["requests"]["R"]["status"] == "preempted"
    assert resumed["segments"][0]["kind"] == "prefill"
    assert resumed["requests"]["R"]["prefill_target"] == 13
    assert resumed["requests"]["R"]["status"] == "decoding"


def finish_and_abort() -> list[dict]:
    builder = RecordBuilder(SETTINGS)
    builder.build(scheduled({"R": (4, 0, 4)}, admitted={"R": Admission(0, 4)}), outcome(["R"]))
    record = builder.build(
        scheduled({"R": (1, 4, 4)}),
        outcome(["R"], sampled={"R": 2}, finished={"R": "stop", "X": "abort"}, aborted=["X"],
                requests={"R": LiveRequest("finished", 4, 5, 2),
                          "X": LiveRequest("finished", 3, 0, 0)}))
    return [record]


def test_finished_and_aborted_requests_are_reported():
    record, = finish_and_abort()
    assert record["finished"] == {"R": "stop", "X": "abort"}
    assert record["aborted"] == ["X"]
    assert {s["status"] for s in record["requests"].values()} == {"finished"}


def test_durations_hold_the_vllm_phases_and_total():
    record = RecordBuilder(SETTINGS).build(scheduled({"R": (4, 0, 4)}), outcome(["R"]))
    assert set(record["durations_ms"]) == {"schedule", "execute", "update", "total"}
    assert record["durations_ms"]["total"] == 10.0
    assert all(v >= 0 for v in record["durations_ms"].values())


def large_pool() -> list[dict]:
    kv = KVSnapshot(LARGE, 16, LARGE - 3, 5, None, None, None)
    return [RecordBuilder(SETTINGS).build(scheduled({"R": (4, 0, 4)}, kv=kv), outcome(["R"]))]


def test_large_pool_ships_counts_only():
    record, = large_pool()
    assert record["kv"] == {"num_blocks": LARGE, "block_size": 16, "num_free": LARGE - 3,
                            "num_cached": 5, "ref_counts": None, "owners": None, "cached": None}


@pytest.mark.parametrize("scenario", [article_step, packed_then_fallback, chunked_prefill,
                                      preempt_and_resume, finish_and_abort, large_pool])
def test_records_pass_batchscope_validation(scenario, validate):
    for record in scenario():
        validate(json.loads(json.dumps(record)))


def test_owner_is_the_first_holder_until_it_lets_go():
    tracker = OwnerTracker(4)
    assert tracker.update([("A", [1, 2])]) == [None, "A", "A", None]
    # B shares A's prefix block 1 (prefix-cache hit) and allocates block 3
    assert tracker.update([("A", [1, 2]), ("B", [1, 3])]) == [None, "A", "A", "B"]
    # A finished; B keeps block 1, which it now owns
    assert tracker.update([("B", [1, 3])]) == [None, "B", None, "B"]
    # C revives block 2 from the prefix cache and also holds B's block 1
    assert tracker.update([("C", [1, 2]), ("B", [1, 3])]) == [None, "B", "C", "B"]
