"""Only the rows that need logits run the last layer past its attention (``PackedLlama.forward``'s
``keep``): every row's keys and values are still written and attended, and the kept rows' hidden
states are the same bits as when every row runs the whole layer, on the fused C layers and on the
modules, in fp32 and bf16, with prompts chunked beside decodes."""
import pytest
import torch
from kernels_here import needs_kernels

from engine import LLM, SamplingParams

pytestmark = needs_kernels
PROMPTS = [list(range(100, 100 + n)) for n in (5, 70, 33, 1)]


def checked_forward(model, seen: list[int]):
    """model.forward, each call with ``keep`` checked against every row's result (recomputing a
    step writes the same keys and values into the same slots)."""
    forward = model.forward

    def check(input_ids, positions, step, keep=None):
        kept = forward(input_ids, positions, step, keep)
        if keep is not None:
            assert torch.equal(kept, forward(input_ids, positions, step)[keep])
            seen.append(len(keep))
        return kept
    return check


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "modules"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_kept_rows_are_the_same_bits_as_every_row_through_every_layer(fused, dtype, monkeypatch):
    llm = LLM("default", dtype=dtype, max_num_batched_tokens=48, num_kv_blocks=64, enable_prefix_caching=False)
    model = llm.engine.loaded.model
    assert model.fused_layers is not None
    if not fused:
        model.fused_layers = None
    seen: list[int] = []
    monkeypatch.setattr(model, "forward", checked_forward(model, seen))
    params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    alone = llm.generate([list(range(100, 200))], params)  # 100 prompt rows in chunks of 48: 0, 0, 1 kept
    outputs = llm.generate(PROMPTS, params)
    assert all(len(o.token_ids) == 4 for o in alone + outputs)
    assert seen[:2] == [0, 0] and max(seen) > 1  # a prompt's first chunks alone; several sampled rows


def test_the_last_layer_runs_its_mlp_on_the_kept_rows_only():
    llm = LLM("default", max_num_batched_tokens=48, num_kv_blocks=64, enable_prefix_caching=False)
    model = llm.engine.loaded.model
    model.fused_layers = None  # (the modules, whose calls a hook sees)
    rows = {"first": [], "last": []}
    hooks = [layer.mlp.register_forward_hook(lambda m, args, out, name=name: rows[name].append(args[0].shape[0]))
             for layer, name in ((model.layers[0], "first"), (model.layers[-1], "last"))]
    llm.generate(PROMPTS, SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))
    for hook in hooks:
        hook.remove()
    assert sum(rows["first"]) == sum(len(p) for p in PROMPTS) + len(PROMPTS)  # every prompt token, one decode each
    assert sum(rows["last"]) == 2 * len(PROMPTS)  # each request's two sampled rows: its prompt's last, its decode
