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
