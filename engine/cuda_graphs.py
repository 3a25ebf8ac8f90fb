"""DecodeGraphs: decode-only steps replayed from captured CUDA graphs.

Why: on a GPU a decode step of a small model is a few hundred short kernels (per layer: norms,
rotary, four GEMMs, attention) and launching them one by one from Python takes longer than
running them. A CUDA graph records the launches once; a replay is one call. A graph works on
fixed shapes at fixed addresses, so decode steps run on static buffers: the batch is padded to
the next captured batch size and the block table to the next captured width. Padded rows decode
token 0 at position 0 into the padding block, a KV block that no request ever owns. A graph
ends at the final hidden states: the LM head runs eagerly on the real rows, so no graph keeps a
``[batch, vocab]`` output alive. Steps that carry a prefill chunk have ragged shapes and run
eagerly.

``capture`` turns a step function into a replay function. On CUDA that is ``cuda_capture``; the
tests pass one that replays eagerly, which checks every buffer, padding and bucket rule on CPU.
"""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .attention import AttentionBackend, StepLayout

Replay = Callable[[], torch.Tensor]
Capture = Callable[[Callable[[], torch.Tensor]], Replay]


def graph_batch_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16, up to ``max_num_seqs`` (always included)."""
    sizes = {b for b in (1, 2, 4, 8) if b < max_num_seqs}
    sizes.update(range(16, max_num_seqs, 16))
    sizes.add(max_num_seqs)
    return sorted(sizes)


def cuda_capture_factory() -> Capture:
    """Captures on CUDA, all graphs sharing one memory pool (they never run concurrently)."""
    pool = torch.cuda.graph_pool_handle()

    def capture(fn: Callable[[], torch.Tensor]) -> Replay:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph, as CUDA graphs require
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = fn()

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay

    return capture


@dataclass(frozen=True, slots=True)
class GraphKey:
    batch: int  # padded number of decodes
    width: int  # padded block-table width, in blocks


class DecodeGraphs:
    """Static buffers plus one captured graph per (batch size, block-table width)."""

    def __init__(
        self,
        forward: Callable[[torch.Tensor, torch.Tensor, object], torch.Tensor],
        backend: AttentionBackend,
        pad_block: int,
        batch_sizes: list[int],
        widths: list[int],
        device: torch.device,
        capture: Capture,
    ):
        self.forward = forward  # (input_ids, positions, plan) -> final hidden states of every row
        self.backend = backend
        self.pad_block = pad_block
        self.batch_sizes = sorted(batch_sizes)
        self.widths = sorted(widths)
        max_batch, max_width = self.batch_sizes[-1], self.widths[-1]
        self.input_ids = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.slot_mapping = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.block_table = torch.zeros(max_batch, max_width, dtype=torch.long, device=device)
        self.seq_lens = torch.ones(max_batch, dtype=torch.long, device=device)
        self._pad_rows(0, max_batch)
        self.graphs: dict[GraphKey, Replay] = {}
        # Largest first, so the shared memory pool is sized once and reused by the smaller ones.
        for batch, width in itertools.product(reversed(self.batch_sizes), reversed(self.widths)):
            key = GraphKey(batch, width)
            self.graphs[key] = capture(lambda key=key: self._step(key))

    def key_for(self, batch: int, width: int) -> GraphKey | None:
        """The smallest captured shape that holds this step, or None (run it eagerly)."""
        b = bisect.bisect_left(self.batch_sizes, batch)
        w = bisect.bisect_left(self.widths, width)
        if b == len(self.batch_sizes) or w == len(self.widths):
            return None
        return GraphKey(self.batch_sizes[b], self.widths[w])

    def run(self, key: GraphKey, input_ids: torch.Tensor, positions: torch.Tensor,
            layout: StepLayout) -> torch.Tensor:
        """Final hidden states ``[decodes, hidden]`` of a decode-only step, replayed in ``key``."""
        n, width = layout.block_table.shape
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slot_mapping[:n].copy_(layout.slot_mapping)
        self.block_table[:n, :width].copy_(layout.block_table)
        self.block_table[:n, width:key.width].fill_(self.pad_block)  # masked: past seq_lens
        self.seq_lens[:n].copy_(torch.tensor(layout.seq_lens_k))
        self._pad_rows(n, key.batch)
        return self.graphs[key]()[:n]

    def _pad_rows(self, start: int, end: int) -> None:
        self.input_ids[start:end] = 0
        self.positions[start:end] = 0
        self.slot_mapping[start:end] = self.pad_block * self.backend.block_size
        self.block_table[start:end] = self.pad_block
        self.seq_lens[start:end] = 1

    def _step(self, key: GraphKey) -> torch.Tensor:
        plan = self.backend.plan_decode(
            self.slot_mapping[: key.batch],
            self.block_table[: key.batch, : key.width],
            self.seq_lens[: key.batch],
        )
        return self.forward(self.input_ids[: key.batch], self.positions[: key.batch], plan)
