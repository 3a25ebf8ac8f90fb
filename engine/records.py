"""The parts of a step's IterationRecord that are read off its packed layout and its requests."""
from __future__ import annotations

from .packing import PackedStep
from .request import Request
from .telemetry import RequestState, Segment


def segments(packed: PackedStep, tokens: list[int | None]) -> list[Segment]:
    """One per scheduled request, in row order; ``tokens`` is what each segment sampled."""
    return [
        Segment(request_id, packed.kinds[i], packed.cu_seqlens_q[i], packed.query_len(i),
                packed.num_cached[i], packed.seq_lens_k[i], packed.num_prompt_tokens[i],
                tokens[i] is not None)
        for i, request_id in enumerate(packed.request_ids)
    ]


def sampled(packed: PackedStep, tokens: list[int | None]) -> dict[str, int]:
    return {rid: token for rid, token in zip(packed.request_ids, tokens, strict=True) if token is not None}


def request_states(requests: list[Request]) -> dict[str, RequestState]:
    return {r.request_id: RequestState(status=r.display_status, num_prompt_tokens=r.num_prompt_tokens,
                                       num_computed_tokens=r.num_computed_tokens,
                                       num_output_tokens=len(r.output_token_ids),
                                       prefill_target=r.prefill_target)
            for r in requests}
