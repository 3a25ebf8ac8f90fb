"""FlashAttention-2 varlen backend (CUDA): one kernel launch per layer for the whole batch.

With a block size that is a multiple of 256, FA2 reads the paged cache directly through the
block table. With smaller blocks the step's keys are first gathered into one contiguous,
packed tensor and the plain varlen kernel runs on that. Decode-only steps (``plan_decode``, the
ones replayed from CUDA graphs) use ``flash_attn_with_kvcache``, whose shapes do not depend on
the context lengths: it reads ``cache_seqlens`` keys of each row from the paged cache, or from
the row's gathered blocks with smaller blocks.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

from ..config import FLASH_ATTN_BLOCK
from .base import AttentionBackend, StepLayout


@dataclass(slots=True)
class FlashPlan:
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor  # int32 [B+1]
    cu_seqlens_k: torch.Tensor  # int32 [B+1]
    max_seqlen_q: int
    max_seqlen_k: int
    block_table: torch.Tensor | None  # int32 [B, max_blocks] (paged mode)
    gather_tables: torch.Tensor | None  # [B, max_blocks] (gather mode)
    key_mask: torch.Tensor | None  # [B, max_blocks * block_size] valid keys (gather mode)


@dataclass(slots=True)
class FlashDecodePlan:
    slot_mapping: torch.Tensor
    block_table: torch.Tensor  # [B, width] block ids
    cache_seqlens: torch.Tensor  # int32 [B]: keys of each row, this step's included


class FlashAttentionBackend(AttentionBackend):
    name = "flash_attn"

    @property
    def paged(self) -> bool:
        """Whether FA2 can read the paged cache through the block table (else: gather mode)."""
        return self.block_size % FLASH_ATTN_BLOCK == 0

    def plan(self, layout: StepLayout, device: torch.device, batch_invariant: bool = False) -> FlashPlan:
        cu_k = [0]
        for n in layout.seq_lens_k:
            cu_k.append(cu_k[-1] + n)
        q_lens = [layout.query_len(i) for i in range(layout.num_segments)]
        tables = self.block_table_tensor(layout, list(range(layout.num_segments)), device)
        block_table = gather_tables = key_mask = None
        if self.paged:
            block_table = tables.to(torch.int32).contiguous()
        else:
            gather_tables = tables
            keys = torch.arange(tables.shape[1] * self.block_size, device=device)
            key_mask = keys < torch.tensor(layout.seq_lens_k, device=device)[:, None]
        return FlashPlan(
            slot_mapping=layout.slot_mapping,
            cu_seqlens_q=torch.tensor(layout.cu_seqlens_q, dtype=torch.int32, device=device),
            cu_seqlens_k=torch.tensor(cu_k, dtype=torch.int32, device=device),
            max_seqlen_q=max(q_lens),
            max_seqlen_k=max(layout.seq_lens_k),
            block_table=block_table,
            gather_tables=gather_tables,
            key_mask=key_mask,
        )

    def graph_widths(self, max_blocks: int) -> list[int]:
        if self.paged:
            return [max_blocks]  # paged: the kernel reads only cache_seqlens keys of each row
        return super().graph_widths(max_blocks)

    def plan_decode(self, slot_mapping, block_table, seq_lens) -> FlashDecodePlan:
        return FlashDecodePlan(slot_mapping, block_table.to(torch.int32), seq_lens.to(torch.int32))

    def forward(self, plan: FlashPlan | FlashDecodePlan, q, k, v, k_cache, v_cache, scale):
        self.write_kv(plan, k, v, k_cache, v_cache)
        if isinstance(plan, FlashDecodePlan):
            return self._decode(plan, q, k_cache, v_cache, scale)
        if plan.block_table is not None:
            keys, values = k_cache, v_cache
        else:
            keys = self.gather_blocks(k_cache, plan.gather_tables)[plan.key_mask]
            values = self.gather_blocks(v_cache, plan.gather_tables)[plan.key_mask]
        return flash_attn_varlen_func(
            q, keys, values,
            cu_seqlens_q=plan.cu_seqlens_q, cu_seqlens_k=plan.cu_seqlens_k,
            max_seqlen_q=plan.max_seqlen_q, max_seqlen_k=plan.max_seqlen_k,
            softmax_scale=scale, causal=True, block_table=plan.block_table,
        )

    def _decode(self, plan: FlashDecodePlan, q, k_cache, v_cache, scale):
        block_table = plan.block_table
        if not self.paged:  # gather mode: [B, width * block_size, ...]
            k_cache = self.gather_blocks(k_cache, plan.block_table)
            v_cache = self.gather_blocks(v_cache, plan.block_table)
            block_table = None
        out = flash_attn_with_kvcache(
            q.unsqueeze(1), k_cache, v_cache, cache_seqlens=plan.cache_seqlens,
            block_table=block_table, softmax_scale=scale, causal=True,
        )
        return out.squeeze(1)
