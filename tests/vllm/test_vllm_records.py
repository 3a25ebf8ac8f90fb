"""The vLLM plugin's record builder on hand-made scheduler steps (no vLLM needed)."""
import json

import pytest
from batchscope_vllm.records import Admission, OwnerTracker, RecordBuilder
from record_scenarios import (
    LARGE,
    SCENARIOS,
    SETTINGS,
    article_step,
    chunked_prefill,
    finish_and_abort,
    large_pool,
    outcome,
    packed_then_fallback,
    preempt_and_resume,
    scheduled,
)


def test_article_step_packs_two_decodes_and_a_prefill_in_runner_order():
    record, = article_step()

    assert [(s["request_id"], s["kind"]) for s in record["segments"]] == [
        ("A", "decode"), ("B", "decode"), ("C", "prefill")]
    assert record["cu_seqlens_q"] == [0, 1, 2, 102]
    assert record["seq_lens_k"] == [501, 201, 100]
    assert record["num_rows"] == 102 and record["padded_rows"] == 300
    assert record["source"] == {"engine": "vllm", "version": "0.32.0", "row_order": "packed",
                                "scheduling": "sync", "data_parallel_rank": 0, "adapter": "0.32"}
    assert record["admitted"] == {"C": 0}




def test_runner_rows_skip_idle_batch_members_and_fall_back_to_scheduler_order():
    packed, fallback = packed_then_fallback()
    assert [s["request_id"] for s in packed["segments"]] == ["A", "B"]
    assert packed["source"]["row_order"] == "packed"
    assert [s["request_id"] for s in fallback["segments"]] == ["B", "A"]
    assert fallback["source"]["row_order"] == "scheduled"
    assert (packed["step"], fallback["step"]) == (0, 1)




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




def test_resumed_request_recomputes_prompt_and_outputs_as_a_prefill():
    preempted, resumed = preempt_and_resume()
    assert preempted["preempted"] == ["R"] and preempted["requests"]["R"]["status"] == "preempted"
    assert resumed["segments"][0]["kind"] == "prefill"
    assert resumed["requests"]["R"]["prefill_target"] == 13
    assert resumed["requests"]["R"]["status"] == "decoding"




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




def test_large_pool_ships_counts_only():
    record, = large_pool()
    assert record["kv"] == {"num_blocks": LARGE, "block_size": 16, "num_free": LARGE - 3,
                            "num_cached": 5, "ref_counts": None, "owners": None, "cached": None}


@pytest.mark.parametrize("scenario", SCENARIOS)
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
