"""A slow, plain-PyTorch stand-in for the two flash-attn functions the flash backend calls,
with their documented semantics (FA2 2.8): q ``[batch, seqlen_q, heads, dim]`` or packed rows,
GQA, causal masks aligned bottom-right, a paged cache read through an int32 ``block_table``,
``cache_seqlens`` int32 keys per row. It lets CPU tests run the backend's own plumbing (plans,
gather mode, int32 tables); the real kernels are tested on a GPU (test_flash_attn.py)."""
import torch
import torch.nn.functional as F


def _attend(q, k, v, scale):
    """q ``[n, heads, dim]`` over k/v ``[keys, kv_heads, dim]``, causal bottom-right."""
    n, keys = q.shape[0], k.shape[0]
    mask = torch.arange(keys)[None, :] <= torch.arange(n)[:, None] + keys - n
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                         v.transpose(0, 1)[None], attn_mask=mask, scale=scale,
                                         enable_gqa=True)
    return out[0].transpose(0, 1)


def _paged(cache, table, n):
    assert table.dtype == torch.int32, "block_table must be int32"
    return cache[table.long()].flatten(0, 1)[:n]


def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table=None,
                            softmax_scale=None, causal=False):
    assert q.dim() == 4 and cache_seqlens.dtype == torch.int32
    rows = []
    for b in range(q.shape[0]):
        n = int(cache_seqlens[b])
        if block_table is None:
            k, v = k_cache[b, :n], v_cache[b, :n]
        else:
            k, v = _paged(k_cache, block_table[b], n), _paged(v_cache, block_table[b], n)
        rows.append(_attend(q[b], k, v, softmax_scale))
    return torch.stack(rows)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=False, block_table=None):
    assert cu_seqlens_q.dtype == cu_seqlens_k.dtype == torch.int32
    out = []
    for b in range(len(cu_seqlens_q) - 1):
        queries = q[cu_seqlens_q[b]:cu_seqlens_q[b + 1]]
        n = int(cu_seqlens_k[b + 1] - cu_seqlens_k[b])
        assert queries.shape[0] <= max_seqlen_q and n <= max_seqlen_k
        if block_table is None:
            keys, values = k[cu_seqlens_k[b]:cu_seqlens_k[b + 1]], v[cu_seqlens_k[b]:cu_seqlens_k[b + 1]]
        else:
            keys, values = _paged(k, block_table[b], n), _paged(v, block_table[b], n)
        out.append(_attend(queries, keys, values, softmax_scale))
    return torch.cat(out)
