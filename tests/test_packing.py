"""One packing per step: the tensors the model runs on and the record the views draw come
from the same PackedStep, so what is shown is what ran."""
from engine import EngineConfig, LLMEngine, SamplingParams


def test_runner_tensors_and_record_share_one_layout(tiny_model_dir, monkeypatch):
    engine = LLMEngine(tiny_model_dir, EngineConfig(max_num_batched_tokens=16, num_kv_blocks=64,
                                                    block_size=4))
    engine.add_request(list(range(5, 45)), SamplingParams(max_tokens=3))  # chunked over 3 steps
    engine.add_request([7, 8], SamplingParams(max_tokens=4, ignore_eos=True))
    ran = []
    execute = engine.runner.execute

    def spy(packed, timer, batch_invariant):
        ran.append((packed, engine.runner.tensors(packed)))
        return execute(packed, timer, batch_invariant)

    monkeypatch.setattr(engine.runner, "execute", spy)
    kinds = set()
    while engine.has_unfinished:
        record = engine.step().record
        packed, (input_ids, positions, layout) = ran[-1]
        assert record.cu_seqlens_q == layout.cu_seqlens_q == packed.cu_seqlens_q
        assert record.seq_lens_k == layout.seq_lens_k and record.num_rows == len(input_ids)
        assert input_ids.tolist() == packed.token_ids
        rows = [(s.request_id, p) for s in record.segments for p in range(s.num_cached, s.num_keys)]
        assert positions.tolist() == [p for _, p in rows]
        slots = [record.block_tables[rid][p // 4] * 4 + p % 4 for rid, p in rows]
        assert layout.slot_mapping.tolist() == slots
        kinds |= {s.kind for s in record.segments}
    assert kinds == {"prefill", "prefill_chunk", "decode"}
