"""Decode-only steps through DecodeGraphs' static buffers, checked on CPU.

The capture used here replays the captured step function eagerly on the static buffers, so
everything but the CUDA capture itself runs: batch and width padding, the padding block, the
plan built from tensors only, and reading back the real rows. (CUDA capture: test_gpu.py.)
"""
import random

import pytest
from hf_reference import compare, hf_greedy, load_hf

from engine import LLM, SamplingParams
from engine.cuda_graphs import DecodeGraphs, GraphKey, graph_batch_sizes


def eager_capture(fn):
    return fn


def test_graph_batch_sizes():
    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert graph_batch_sizes(64) == [1, 2, 4, 8, 16, 32, 48, 64]


def test_cuda_graphs_need_cuda(tiny_model_dir):
    with pytest.raises(ValueError, match="cuda_graphs=True needs device='cuda'"):
        LLM(tiny_model_dir, device="cpu", cuda_graphs=True)
    with pytest.raises(ValueError, match="cuda_graphs must be"):
        LLM(tiny_model_dir, device="cpu", cuda_graphs="yes")
    assert LLM(tiny_model_dir, device="cpu").engine.runner.decode_graphs is None


def make_llm(model_dir: str, graphs: bool) -> LLM:
    llm = LLM(model_dir, device="cpu", dtype="float32", block_size=4, max_model_len=128,
              max_num_seqs=8, max_num_batched_tokens=32)
    if graphs:
        llm.engine.runner.capture_decode_graphs(eager_capture)
    return llm


def test_shapes_pad_to_the_next_captured_size(tiny_model_dir):
    graphs = make_llm(tiny_model_dir, graphs=True).engine.runner.decode_graphs
    assert graphs.batch_sizes == [1, 2, 4, 8] and graphs.widths == [8, 16, 32]
    assert len(graphs.graphs) == 12
    assert graphs.key_for(3, 1) == GraphKey(4, 8)
    assert graphs.key_for(8, 9) == GraphKey(8, 16)
    assert graphs.key_for(5, 32) == GraphKey(8, 32)
    assert graphs.key_for(9, 4) is None and graphs.key_for(2, 33) is None


def test_graph_steps_match_eager_steps_and_transformers(tiny_model_dir, monkeypatch):
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 1000) for _ in range(n)] for n in (1, 5, 17, 40, 3, 60, 9)]
    # Different lengths, so the decode batch shrinks 7 -> 1 and pads to 8, 4, 2, 1; one
    # request samples with a seed, whose generator must advance as in eager steps.
    params = [SamplingParams(max_tokens=m, temperature=0, ignore_eos=True) for m in (12, 3, 8, 20, 5, 16, 10)]
    params[2] = SamplingParams(max_tokens=8, temperature=0.8, top_k=20, seed=7, ignore_eos=True)

    used: list[tuple[int, GraphKey]] = []
    run = DecodeGraphs.run

    def spy(self, key, input_ids, positions, layout):
        used.append((len(input_ids), key))
        return run(self, key, input_ids, positions, layout)

    monkeypatch.setattr(DecodeGraphs, "run", spy)
    eager = make_llm(tiny_model_dir, graphs=False).generate(prompts, params)
    assert not used
    llm = make_llm(tiny_model_dir, graphs=True)
    records = []
    graphed = llm.generate(prompts, params, on_iteration=records.append)

    assert [o.token_ids for o in graphed] == [o.token_ids for o in eager]
    decode_only = [r for r in records if all(s.kind == "decode" for s in r.segments)]
    assert len(used) == len(decode_only) > 10  # every decode-only step replayed a graph
    assert any(n < key.batch for n, key in used)  # padded rows were run (and dropped)
    assert len({key.width for _, key in used}) > 1  # the table width follows the longest context
    manager = llm.engine.block_manager
    manager.check_invariants([])
    assert manager.num_free == llm.config.num_kv_blocks

    greedy = [i for i, p in enumerate(params) if p.temperature == 0]
    hf = load_hf(tiny_model_dir)
    subset = [prompts[i] for i in greedy]
    refs = hf_greedy(hf, subset, 20)
    refs = [ref[: params[i].max_tokens] for ref, i in zip(refs, greedy)]
    compare(hf, subset, refs, [graphed[i] for i in greedy]).assert_ok()
