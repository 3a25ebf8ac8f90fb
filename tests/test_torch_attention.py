"""The torch backend's decode paths equal plain per-request attention: decodes split in length
groups (fp32 SDPA), and bf16 decodes attended in fp32 matmuls."""
import random

import pytest
import torch

from engine.attention import StepLayout, make_backend
from engine.attention.torch_backend import split_by_length

BLOCK = 16


def reference(q, k_cache, v_cache, tables, seq_lens, scale):
    """Each row's query against its own keys, one request at a time, in fp32."""
    heads, kv_heads = q.shape[1], k_cache.shape[2]
    out = []
    for i, (table, n) in enumerate(zip(tables, seq_lens)):
        keys = k_cache[table].flatten(0, 1)[:n].float().repeat_interleave(heads // kv_heads, dim=1)
        values = v_cache[table].flatten(0, 1)[:n].float().repeat_interleave(heads // kv_heads, dim=1)
        probs = torch.softmax(torch.einsum("hd,khd->hk", q[i].float(), keys) * scale, dim=-1)
        out.append(torch.einsum("hk,khd->hd", probs, values))
    return torch.stack(out)


def test_split_by_length_cuts_where_padding_falls_most():
    assert split_by_length([1, 1, 1, 30]) == 3  # three short ones apart from the long one
    assert split_by_length([10, 10, 11, 11]) == 0  # nothing worth a second call
    assert split_by_length([5]) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decodes_of_spread_lengths_match_per_request_attention(dtype):
    torch.manual_seed(0)
    rng = random.Random(0)
    heads, kv_heads, dim = 9, 3, 64
    seq_lens = [1, 3, 17, 40, 250, 300, 449, 5]
    pool = list(range(sum(-(-n // BLOCK) for n in seq_lens)))
    rng.shuffle(pool)  # a request's blocks need not be in order in the pool
    tables, next_block = [], 0
    for n in seq_lens:
        blocks = -(-n // BLOCK)
        tables.append(pool[next_block:next_block + blocks])
        next_block += blocks
    k_cache = torch.randn(next_block, BLOCK, kv_heads, dim).to(dtype)
    v_cache = torch.randn(next_block, BLOCK, kv_heads, dim).to(dtype)
    width = max(len(t) for t in tables)
    table_t = torch.tensor([t + [t[0]] * (width - len(t)) for t in tables])
    positions = torch.tensor(seq_lens) - 1
    rows = torch.arange(len(seq_lens))
    slots = table_t[rows, positions // BLOCK] * BLOCK + positions % BLOCK
    layout = StepLayout(list(range(len(seq_lens) + 1)), [n - 1 for n in seq_lens], seq_lens, table_t, slots)
    q = torch.randn(len(seq_lens), heads, dim).to(dtype)
    k = torch.randn(len(seq_lens), kv_heads, dim).to(dtype)
    v = torch.randn(len(seq_lens), kv_heads, dim).to(dtype)
    backend = make_backend("torch", BLOCK)
    plan = backend.plan(layout, torch.device("cpu"))
    assert len(plan.decodes) == 2
    out = backend.forward(plan, q, k, v, k_cache, v_cache, dim**-0.5)  # writes this step's K/V first
    assert out.dtype == dtype
    expected = reference(q, k_cache, v_cache, tables, seq_lens, dim**-0.5)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), expected, atol=tolerance, rtol=tolerance)
