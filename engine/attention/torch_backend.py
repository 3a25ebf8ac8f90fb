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
    key_slots: torch.Tensor | None  # None: attend to this step's rows only (causal)
    mask: torch.Tensor | None  # [q, k] bool, True = attend


@dataclass(slots=True)
class TorchPlan:
    slot_mapping: torch.Tensor
    decode_rows: torch.Tensor | None = None  # [D] row index of each decode segment
    decode_slots: torch.Tensor | None = None  # [D, max_k]
    decode_mask: torch.Tensor | None = None  # [D, 1, 1, max_k]
    prefills: list[PrefillSegment] = field(default_factory=list)


class TorchAttentionBackend(AttentionBackend):
    name = "torch"

    def plan(self, layout: StepLayout, device: torch.device) -> TorchPlan:
        plan = TorchPlan(slot_mapping=layout.slot_mapping)
        decodes = [i for i in range(layout.num_segments) if layout.query_len(i) == 1]
        if decodes:
            slots = self.key_slots(layout, decodes, device)
            lens = torch.tensor([layout.seq_lens_k[i] for i in decodes], device=device)
            plan.decode_rows = torch.tensor([layout.cu_seqlens_q[i] for i in decodes], device=device)
            plan.decode_slots = slots
            plan.decode_mask = (torch.arange(slots.shape[1], device=device) < lens[:, None])[:, None, None, :]
        for i in range(layout.num_segments):
            if layout.query_len(i) == 1:
                continue
            start, end = layout.cu_seqlens_q[i], layout.cu_seqlens_q[i + 1]
            cached = layout.num_cached[i]
            if cached == 0:
                plan.prefills.append(PrefillSegment(start, end, None, None))
                continue
            keys = torch.arange(layout.seq_lens_k[i], device=device)
            queries = torch.arange(cached, cached + end - start, device=device)
            mask = keys[None, :] <= queries[:, None]
            plan.prefills.append(PrefillSegment(start, end, self.key_slots(layout, [i], device)[0], mask))
        return plan

    def forward(self, plan: TorchPlan, q, k, v, k_cache, v_cache, scale):
        self.write_kv(plan, k, v, k_cache, v_cache)
        flat_k = k_cache.view(-1, *k.shape[1:])
        flat_v = v_cache.view(-1, *v.shape[1:])
        out = torch.empty_like(q)
        if plan.decode_rows is not None:
            keys = flat_k[plan.decode_slots].transpose(1, 2)  # [D, kv_heads, max_k, dim]
            values = flat_v[plan.decode_slots].transpose(1, 2)
            queries = q[plan.decode_rows].unsqueeze(2)  # [D, heads, 1, dim]
            o = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=plan.decode_mask, scale=scale, enable_gqa=True
            )
            out[plan.decode_rows] = o.squeeze(2)
        for seg in plan.prefills:
            queries = q[seg.row_start : seg.row_end].transpose(0, 1)  # [heads, n, dim]
            if seg.key_slots is None:
                keys = k[seg.row_start : seg.row_end].transpose(0, 1)
                values = v[seg.row_start : seg.row_end].transpose(0, 1)
            else:
                keys = flat_k[seg.key_slots].transpose(0, 1)
                values = flat_v[seg.key_slots].transpose(0, 1)
            o = F.scaled_dot_product_attention(
                queries.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0),
                attn_mask=seg.mask, is_causal=seg.mask is None, scale=scale, enable_gqa=True,
            )
            out[seg.row_start : seg.row_end] = o[0].transpose(0, 1)
        return out
