"""What every attention backend receives: the step's layout, and one layer's q/k/v."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class StepLayout:
    """The packed batch of one step, as plain lists (segments in row order).

    Segment ``i`` owns rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]``; its queries sit at
    positions ``num_cached[i] ..`` and attend to keys ``0 .. seq_lens_k[i]-1`` of its request
    (causal, bottom-right aligned), which live in the blocks of row ``i`` of ``block_table``.
    """

    cu_seqlens_q: list[int]
    num_cached: list[int]
    seq_lens_k: list[int]
    block_table: torch.Tensor  # [segments, max blocks], short rows padded with their first block
    slot_mapping: torch.Tensor  # [num_rows] slot of each row's new K/V

    @property
    def num_segments(self) -> int:
        return len(self.seq_lens_k)

    def query_len(self, i: int) -> int:
        return self.cu_seqlens_q[i + 1] - self.cu_seqlens_q[i]


class AttentionBackend:
    """Plans once per step (``plan``), then runs once per layer (``forward``)."""

    name = "base"

    def __init__(self, block_size: int):
        self.block_size = block_size

    def unsupported(self, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> str | None:
        """Why this backend cannot run a model of these shapes here, or None."""
        return None

    def plan(self, layout: StepLayout, device: torch.device, batch_invariant: bool = False) -> object:
        """The step's plan; ``batch_invariant`` (the step's setting) is honoured by the CPU
        backend only (EngineConfig checks)."""
        raise NotImplementedError

    def plan_decode(self, slot_mapping: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor) -> object:
        """The plan of a step of decodes only (row ``i`` = segment ``i``), from tensors alone:
        no host reads, so it can be captured in a CUDA graph (``cuda_graphs.py``)."""
        raise NotImplementedError

    def graph_widths(self, max_blocks: int) -> list[int]:
        """Block-table widths to capture decode graphs for: powers of two from 8 blocks, then
        ``max_blocks``, since a decode gathers (and masks) every block of its padded width."""
        widths = [w for w in (2**i for i in range(3, max_blocks.bit_length())) if w < max_blocks]
        return [*widths, max_blocks]

    def forward(
        self,
        plan: object,
        q: torch.Tensor,  # [rows, num_heads, head_dim]
        k: torch.Tensor,  # [rows, num_kv_heads, head_dim]
        v: torch.Tensor,
        k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        v_cache: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def write_kv(plan, k, v, k_cache, v_cache) -> None:
        """Store this step's K/V rows into their slots (slot mapping) of the paged cache."""
        slots = plan.slot_mapping
        k_cache.view(-1, *k.shape[1:]).index_copy_(0, slots, k.to(k_cache.dtype))
        v_cache.view(-1, *v.shape[1:]).index_copy_(0, slots, v.to(v_cache.dtype))

    def block_table_tensor(self, layout: StepLayout, segments: list[int], device: torch.device) -> torch.Tensor:
        """Rows ``segments`` of the step's block table, as wide as their longest context.

        Gathering whole blocks copies block-sized runs of memory, far faster on CPU than
        gathering slot by slot; the padding blocks are masked out by the callers.
        """
        width = -(-max(layout.seq_lens_k[i] for i in segments) // self.block_size)
        table = layout.block_table
        if segments != list(range(layout.num_segments)):
            table = table.index_select(0, torch.tensor(segments, device=device))
        return table[:, :width]

    def key_mask(self, block_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        """``[segments, blocks * block_size]``: True for the keys each segment really has."""
        keys = torch.arange(block_table.shape[1] * self.block_size, device=block_table.device)
        return keys < seq_lens[:, None]

    @staticmethod
    def gather_blocks(cache: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
        """``[segments, max blocks * block_size, kv_heads, head_dim]`` keys or values in order.

        ``index_select`` on the flattened table: about 5x faster on CPU than ``cache[tables]``.
        """
        blocks = cache.index_select(0, tables.flatten())
        return blocks.view(tables.shape[0], -1, *cache.shape[2:])
