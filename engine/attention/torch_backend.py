"""Reference attention in plain PyTorch (CPU and CUDA, any block size).

Decode segments (one query each) are attended together in one padded SDPA call over their
gathered keys; each multi-token segment is one SDPA call, causal and bottom-right aligned, on
this step's K/V directly when nothing of it was cached before, else on its gathered keys.
The plan (gather indices and masks) is built once per step and shared by all layers.
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
class TorchPlan:
    slot_mapping: torch.Tensor
    decode_rows: slice | torch.Tensor | None = None  # rows of the one-query segments
    decode_tables: torch.Tensor | None = None  # [D, max blocks]
    decode_mask: torch.Tensor | None = None  # [D, 1, 1, max blocks * block_size]
    prefills: list[PrefillSegment] = field(default_factory=list)


class TorchAttentionBackend(AttentionBackend):
    name = "torch"

    def plan(self, layout: StepLayout, device: torch.device) -> TorchPlan:
        plan = TorchPlan(slot_mapping=layout.slot_mapping)
        decodes = [i for i in range(layout.num_segments) if layout.query_len(i) == 1]
        if decodes:
            tables = self.block_table_tensor(layout, decodes, device)
            lens = torch.tensor([layout.seq_lens_k[i] for i in decodes], device=device)
            rows = [layout.cu_seqlens_q[i] for i in decodes]
            contiguous = rows == list(range(rows[0], rows[0] + len(rows)))
            plan.decode_rows = slice(rows[0], rows[0] + len(rows)) if contiguous else torch.tensor(rows, device=device)
            plan.decode_tables = tables
            plan.decode_mask = self.key_mask(tables, lens)[:, None, None, :]
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

    def plan_decode(self, slot_mapping, block_table, seq_lens) -> TorchPlan:
        return TorchPlan(
            slot_mapping=slot_mapping,
            decode_rows=slice(0, block_table.shape[0]),
            decode_tables=block_table,
            decode_mask=self.key_mask(block_table, seq_lens)[:, None, None, :],
        )

    def forward(self, plan: TorchPlan, q, k, v, k_cache, v_cache, scale):
        self.write_kv(plan, k, v, k_cache, v_cache)
        out = torch.empty_like(q)
        if plan.decode_rows is not None:
            keys = self.gather_blocks(k_cache, plan.decode_tables).transpose(1, 2)  # [D, kv_heads, max_k, dim]
            values = self.gather_blocks(v_cache, plan.decode_tables).transpose(1, 2)
            queries = q[plan.decode_rows].unsqueeze(2)  # [D, heads, 1, dim]
            o = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=plan.decode_mask, scale=scale, enable_gqa=True
            )
            out[plan.decode_rows] = o.squeeze(2)
        for seg in plan.prefills:
            queries = q[seg.row_start : seg.row_end].transpose(0, 1)  # [heads, n, dim]
            if seg.table is None:
                keys = k[seg.row_start : seg.row_end].transpose(0, 1)
                values = v[seg.row_start : seg.row_end].transpose(0, 1)
            else:
                keys = self.gather_blocks(k_cache, seg.table)[0].transpose(0, 1)
                values = self.gather_blocks(v_cache, seg.table)[0].transpose(0, 1)
            o = F.scaled_dot_product_attention(
                queries.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0),
                attn_mask=seg.mask, is_causal=seg.mask is None, scale=scale, enable_gqa=True,
            )
            out[seg.row_start : seg.row_end] = o[0].transpose(0, 1)
        return out
