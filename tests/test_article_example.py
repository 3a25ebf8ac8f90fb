"""The seed article's example: A and B decoding while C's 100-token prompt arrives."""
import json

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.telemetry import validate_record


def test_one_mixed_step_packs_1_plus_1_plus_100_rows(tiny_model_dir):
    engine = LLMEngine(tiny_model_dir, EngineConfig(max_num_batched_tokens=1024))
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    engine.add_request(list(range(100, 600)), params, request_id="A")  # 500 prompt tokens
    engine.add_request(list(range(700, 900)), params, request_id="B")  # 200 prompt tokens
    first = engine.step().record  # both prompts prefilled, first tokens sampled
    assert [s.num_rows for s in first.segments] == [500, 200]
    engine.add_request(list(range(1000, 1100)), params, request_id="C")

    record = engine.step().record

    assert [(s.request_id, s.kind, s.num_rows) for s in record.segments] == [
        ("A", "decode", 1), ("B", "decode", 1), ("C", "prefill", 100)]
    assert record.num_rows == 102
    assert record.cu_seqlens_q == [0, 1, 2, 102]
    assert record.seq_lens_k == [501, 201, 100]
    assert [s.num_cached for s in record.segments] == [500, 200, 0]
    assert set(record.sampled) == {"A", "B", "C"}  # every request advanced in the same pass
    assert record.padded_rows == 300  # a padded batch would need 3 x 100 rows
    data = json.loads(json.dumps(record.to_dict()))
    validate_record(data)
    assert len(data["block_tables"]["A"]) == -(-501 // engine.config.block_size)
