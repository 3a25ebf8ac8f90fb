"""IterationRecord.to_dict is the plain-data form of the record, and JSON round-trips."""
import json
from dataclasses import asdict

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.telemetry import validate_record


def test_to_dict_equals_asdict_and_validates(tiny_model_dir):
    engine = LLMEngine(tiny_model_dir, EngineConfig(max_num_batched_tokens=16, num_kv_blocks=64))
    engine.add_request(list(range(5, 45)), SamplingParams(max_tokens=3))
    engine.add_request([7, 8], SamplingParams(max_tokens=3))
    while engine.has_unfinished:
        record = engine.step().record
        data = record.to_dict()
        assert data == asdict(record)
        validate_record(json.loads(json.dumps(data)))


def test_validate_names_the_broken_field(tiny_model_dir):
    engine = LLMEngine(tiny_model_dir, EngineConfig(num_kv_blocks=64))
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=1))
    data = engine.step().record.to_dict()
    broken = {**data, "segments": [{**data["segments"][0], "kind": "bogus"}]}
    with pytest.raises(ValueError, match=r"segments\[0\].kind"):
        validate_record(broken)
    with pytest.raises(ValueError, match="schema_version"):
        validate_record({**data, "schema_version": 99})


def v1_record(data: dict) -> dict:
    old = {k: v for k, v in data.items() if k != "source"}
    return {**old, "schema_version": 1}


def test_version_1_records_validate_and_upgrade(tiny_model_dir):
    from engine.telemetry import upgrade_record

    engine = LLMEngine(tiny_model_dir, EngineConfig(num_kv_blocks=64))
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=1))
    data = engine.step().record.to_dict()
    assert data["schema_version"] == 2 and data["source"]["engine"] == "batchscope"
    old = v1_record(data)
    validate_record(old)
    upgraded = upgrade_record(old)
    assert upgraded["schema_version"] == 2 and upgraded["source"] == {
        "engine": "batchscope", "version": "", "row_order": "packed"}
    validate_record(upgraded)
    assert upgrade_record(data) is data
    with pytest.raises(ValueError, match="durations_ms"):
        validate_record({**old, "durations_ms": {"execute": 1.0, "total": 1.0}})


def test_other_sources_phases_and_count_only_pools_validate(tiny_model_dir):
    engine = LLMEngine(tiny_model_dir, EngineConfig(num_kv_blocks=64))
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=1))
    data = engine.step().record.to_dict()
    vllm = {**data, "source": {"engine": "vllm", "version": "0.32.0", "row_order": "scheduled"},
            "durations_ms": {"schedule": 0.1, "execute": 2.0, "update": 0.2, "total": 2.4},
            "kv": {**data["kv"], "ref_counts": None, "owners": None, "cached": None}}
    validate_record(vllm)
    with pytest.raises(ValueError, match="total"):
        validate_record({**vllm, "durations_ms": {"execute": 2.0}})
    with pytest.raises(ValueError, match="execute"):
        validate_record({**vllm, "durations_ms": {"execute": -1, "total": 1}})
    with pytest.raises(ValueError, match="row_order"):
        validate_record({**vllm, "source": {**vllm["source"], "row_order": "random"}})
    with pytest.raises(ValueError, match="both null"):
        validate_record({**vllm, "kv": {**vllm["kv"], "owners": [None] * 64}})


def test_large_pools_ship_counts_only():
    from engine.block_manager import BlockManager
    from engine.telemetry import KV_DETAIL_LIMIT

    small = BlockManager(KV_DETAIL_LIMIT, 16, True).snapshot()
    large = BlockManager(KV_DETAIL_LIMIT + 1, 16, True).snapshot()
    assert len(small.ref_counts) == KV_DETAIL_LIMIT and small.cached == []
    assert (large.ref_counts, large.owners, large.cached) == (None, None, None)
    assert (large.num_blocks, large.num_free) == (KV_DETAIL_LIMIT + 1, KV_DETAIL_LIMIT + 1)
