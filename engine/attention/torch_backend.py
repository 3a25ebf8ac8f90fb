"""Reference attention in plain PyTorch (CPU and CUDA, any block size).

Decode segments (one query each) are attended together in padded SDPA calls over their
gathered keys; each multi-token segment is one SDPA call, causal and bottom-right aligned, on
this step's K/V directly when nothing of it was cached before, else on its gathered keys.
The plan (gather indices and masks) is built once per step and shared by all layers.

Decodes over a bf16 KV cache are attended by ``decode_attention_fp32``: torch's CPU flash kernel
is slow for one bf16 query per row (2.5 ms a layer for 16 decodes, 64% of a bf16 decode step),
while two small fp32 matmuls over the keys converted once take a quarter of that. Prefill
segments convert their gathered keys to the queries' dtype (a bf16 model on CPU keeps fp32
activations, see ``models/llama.py``).

Why decode groups: a padded call gathers (copies) and attends every decode's keys up to the
longest one's width, so with context lengths spread over 16-450 tokens half of the keys moved
are padding. Decodes sorted by length are split in two groups where that removes at least a
tenth of the padded area; each group gathers only up to its own longest context.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .base import AttentionBackend, StepLayout


@dataclass(slots=True)
class PrefillSegment:
    row_start: int
    row_end: int
    table: torch.Tensor | None  # [1, blocks]; None: attend to this step's rows only (causal)
    mask: torch.Tensor | None  # [q, blocks * block_size] bool, True = attend


@dataclass(slots=True)
class DecodeGroup:
    rows: slice | torch.Tensor  # rows of its one-query segments
    tables: torch.Tensor  # [D, max blocks]
    mask: torch.Tensor  # [D, 1, 1, max blocks * block_size]


@dataclass(slots=True)
class TorchPlan:
    slot_mapping: torch.Tensor
    decodes: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillSegment] = field(default_factory=list)


MIN_SPLIT_SAVING = 0.1  # split the decodes in two groups only if that removes this much padding


def split_by_length(blocks: list[int]) -> int:
    """Where to cut decodes sorted by ascending block count into two padded groups (0: keep
    one): the cut that minimises the padded area, if it saves ``MIN_SPLIT_SAVING`` of it."""
    whole = len(blocks) * blocks[-1]
    best, cut = whole, 0
    for i in range(1, len(blocks)):
        area = i * blocks[i - 1] + (len(blocks) - i) * blocks[-1]
        if area < best:
            best, cut = area, i
    return cut if best <= (1 - MIN_SPLIT_SAVING) * whole else 0


class TorchAttentionBackend(AttentionBackend):
    name = "torch"

    def plan(self, layout: StepLayout, device: torch.device, batch_invariant: bool = False) -> TorchPlan:
        plan = TorchPlan(slot_mapping=layout.slot_mapping)
        decodes = sorted((i for i in range(layout.num_segments) if layout.query_len(i) == 1),
                         key=lambda i: layout.seq_lens_k[i])
        if decodes:
            cut = split_by_length([-(-layout.seq_lens_k[i] // self.block_size) for i in decodes])
            groups = [decodes[:cut], decodes[cut:]] if cut else [decodes]
            plan.decodes = [self._decode_group(layout, group, device) for group in groups]
        for i in range(layout.num_segments):
            if layout.query_len(i) == 1:
                continue
            start, end = layout.cu_seqlens_q[i], layout.cu_seqlens_q[i + 1]
            cached = layout.num_cached[i]
            if cached == 0:
                plan.prefills.append(PrefillSegment(start, end, None, None))
                continue
            table = self.block_table_tensor(layout, [i], device)
            keys = torch.arange(table.shape[1] * self.block_size, device=device)
            queries = torch.arange(cached, cached + end - start, device=device)
            mask = keys[None, :] <= queries[:, None]  # causal, bottom-right aligned
            plan.prefills.append(PrefillSegment(start, end, table, mask))
        return plan

    def _decode_group(self, layout: StepLayout, segments: list[int], device: torch.device) -> DecodeGroup:
        tables = self.block_table_tensor(layout, segments, device)
        lens = torch.tensor([layout.seq_lens_k[i] for i in segments], device=device)
        rows = [layout.cu_seqlens_q[i] for i in segments]
        contiguous = rows == list(range(rows[0], rows[0] + len(rows)))
        index = slice(rows[0], rows[0] + len(rows)) if contiguous else torch.tensor(rows, device=device)
        return DecodeGroup(index, tables, self.key_mask(tables, lens)[:, None, None, :])

    def plan_decode(self, slot_mapping, block_table, seq_lens) -> TorchPlan:
        mask = self.key_mask(block_table, seq_lens)[:, None, None, :]
        return TorchPlan(slot_mapping, [DecodeGroup(slice(0, block_table.shape[0]), block_table, mask)])

    def forward(self, plan: TorchPlan, q, k, v, k_cache, v_cache, scale):
        self.write_kv(plan, k, v, k_cache, v_cache)
        out = torch.empty_like(q)
        for group in plan.decodes:
            keys = self.gather_blocks(k_cache, group.tables).transpose(1, 2)  # [D, kv_heads, max_k, dim]
            values = self.gather_blocks(v_cache, group.tables).transpose(1, 2)
            if keys.dtype != torch.float32:
                out[group.rows] = decode_attention_fp32(q[group.rows], keys, values, group.mask, scale)
                continue
            queries = q[group.rows].unsqueeze(2)  # [D, heads, 1, dim]
            o = F.scaled_dot_product_attention(queries, keys, values, attn_mask=group.mask, scale=scale,
                                               enable_gqa=True)
            out[group.rows] = o.squeeze(2)
        for seg in plan.prefills:
            queries = q[seg.row_start : seg.row_end].transpose(0, 1)  # [heads, n, dim]
            if seg.table is None:
                keys = k[seg.row_start : seg.row_end].transpose(0, 1)
                values = v[seg.row_start : seg.row_end].transpose(0, 1)
            else:
                keys = self.gather_blocks(k_cache, seg.table)[0].transpose(0, 1).to(q.dtype)
                values = self.gather_blocks(v_cache, seg.table)[0].transpose(0, 1).to(q.dtype)
            o = F.scaled_dot_product_attention(
                queries.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0),
                attn_mask=seg.mask, is_causal=seg.mask is None, scale=scale, enable_gqa=True,
            )
            out[seg.row_start : seg.row_end] = o[0].transpose(0, 1)
        return out



def decode_attention_fp32(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                          scale: float) -> torch.Tensor:
    """One query per row (``q`` ``[D, heads, dim]``) against its keys and values
    ``[D, kv_heads, L, dim]`` (``mask`` ``[D, 1, 1, L]``), computed in fp32: each kv head's
    group of query heads in one matmul, then softmax, then one matmul with the values."""
    rows, heads, dim = q.shape
    kv_heads = keys.shape[1]
    keys = keys.to(torch.float32, memory_format=torch.contiguous_format)
    values = values.to(torch.float32, memory_format=torch.contiguous_format)
    scores = torch.matmul(q.float().view(rows, kv_heads, heads // kv_heads, dim), keys.transpose(-1, -2))
    scores = scores.mul_(scale).masked_fill_(~mask, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), values)  # [D, kv_heads, group, dim]
    return out.view(rows, heads, dim).to(q.dtype)
