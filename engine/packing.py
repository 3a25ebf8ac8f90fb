"""pack(): one step's scheduled tokens laid out as the rows of one ragged batch.

The layout is derived once per step, here, and read twice: by the model runner, which turns
it into tensors (``ModelRunner.tensors``), and by the record builder, which shows it
(``records.py``). Segment ``i`` is scheduled request ``i``: it owns rows
``cu_seqlens_q[i]:cu_seqlens_q[i+1]``, whose tokens sit at positions ``num_cached[i] ..
seq_lens_k[i] - 1`` and attend to keys ``0 .. seq_lens_k[i] - 1`` in the blocks of
``block_tables[i]``. ``[A:1, B:1, C:100]`` is ``cu_seqlens_q = [0, 1, 2, 102]``.

Plain lists, no torch; block tables are copied, since the step's end may free a request's
blocks and the record must show those the step used.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .sampling_params import SamplingParams
from .scheduler import ScheduledRequest


@dataclass(slots=True)
class PackedStep:
    request_ids: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # "prefill" | "prefill_chunk" | "decode"
    num_prompt_tokens: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # one per row
    cu_seqlens_q: list[int] = field(default_factory=lambda: [0])
    num_cached: list[int] = field(default_factory=list)  # first position of each segment
    seq_lens_k: list[int] = field(default_factory=list)  # num_cached + the segment's rows
    block_tables: list[list[int]] = field(default_factory=list)
    sample_at: list[int] = field(default_factory=list)  # segments whose last row is sampled
    sampling: list[tuple[SamplingParams, object]] = field(default_factory=list)  # (params, generator) per sample_at

    @property
    def num_segments(self) -> int:
        return len(self.request_ids)

    @property
    def num_rows(self) -> int:
        return self.cu_seqlens_q[-1]

    def query_len(self, i: int) -> int:
        return self.cu_seqlens_q[i + 1] - self.cu_seqlens_q[i]

    @property
    def logits_rows(self) -> list[int]:
        """The row whose logits sample each ``sample_at`` segment: its last."""
        return [self.cu_seqlens_q[i + 1] - 1 for i in self.sample_at]

    @property
    def padded_rows(self) -> int:
        """Rows a padded batch would need: segments x longest segment."""
        return self.num_segments * max((self.query_len(i) for i in range(self.num_segments)), default=0)


def pack(scheduled: list[ScheduledRequest]) -> PackedStep:
    packed = PackedStep()
    for i, item in enumerate(scheduled):
        request = item.request
        start = request.num_computed_tokens
        end = start + item.num_new_tokens
        packed.request_ids.append(request.request_id)
        packed.kinds.append(item.kind)
        packed.num_prompt_tokens.append(request.num_prompt_tokens)
        packed.token_ids.extend(_tokens(request, start, end))
        packed.cu_seqlens_q.append(packed.cu_seqlens_q[-1] + item.num_new_tokens)
        packed.num_cached.append(start)
        packed.seq_lens_k.append(end)
        packed.block_tables.append(list(request.block_ids))
        if item.completes_prefill:
            packed.sample_at.append(i)
            packed.sampling.append((request.sampling_params, request.generator))
    return packed


def _tokens(request, start: int, end: int) -> list[int]:
    if end - start == 1:  # a decode: no need to build prompt + output
        return [request.token_at(start)]
    if end <= request.num_prompt_tokens:
        return request.prompt_token_ids[start:end]
    return request.all_token_ids[start:end]
