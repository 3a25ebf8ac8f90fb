"""ModelRunner: turns one scheduled step into one forward pass and one token per request.

Design note. The scheduled requests are packed into a single ragged batch with no padding:
segment ``i`` contributes its ``num_new_tokens`` rows (a decode 1 row, a prompt chunk many),
so ``[A:1, B:1, C:100]`` is a ``[102, hidden]`` tensor and every linear layer is one GEMM over
all 102 rows. Alongside the token ids the runner builds, with tensor ops rather than loops
over tokens, each row's position and its slot in the paged KV cache (the slot mapping), plus
``cu_seqlens_q``, the key length of each segment and its block table; the attention backend
turns these into its plan once per step and uses it in every layer, so attention is the only
place where requests stay apart. After the final norm only the rows whose logits are needed
(each decode, and the last row of a prefill that completes) go through the LM head; the
logits are split back per request and sampled in one vectorised call. On CUDA the forward pass
of a step of decodes only is instead replayed from a captured CUDA graph (``cuda_graphs.py``;
the LM head stays outside, on the real rows only); the KV cache has one block more than the
pool, the padding block that padded graph rows write to.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from .attention import StepLayout, make_backend
from .config import EngineConfig
from .cuda_graphs import Capture, DecodeGraphs, GraphKey, cuda_capture_factory, graph_batch_sizes
from .loader import LoadedModel
from .sampler import Sampler
from .scheduler import ScheduledRequest
from .timing import PhaseTimer

log = logging.getLogger(__name__)
# cuDNN attention builds a plan for every new shape, and packed steps rarely repeat a shape.
CUDA_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@dataclass(slots=True)
class ForwardStep:
    """What a layer needs to attend: the backend, its plan for this step, the KV cache."""

    backend: object
    plan: object
    k_cache: torch.Tensor  # [layers, blocks, block_size, kv_heads, head_dim]
    v_cache: torch.Tensor

    def attend(self, layer: int, q, k, v, scale: float) -> torch.Tensor:
        return self.backend.forward(self.plan, q, k, v, self.k_cache[layer], self.v_cache[layer], scale)


class ModelRunner:
    def __init__(self, loaded: LoadedModel, config: EngineConfig):
        self.model = loaded.model
        self.config = config
        self.device = torch.device(config.device)
        self.block_size = config.block_size
        self.backend = make_backend(config.attention_backend, config.block_size)
        attn = self.model.layers[0].self_attn
        self.pad_block = config.num_kv_blocks  # never handed out by the BlockManager
        shape = (
            len(self.model.layers),
            config.num_kv_blocks + 1,
            config.block_size,
            attn.num_kv_heads,
            attn.head_dim,
        )
        self.k_cache = torch.zeros(shape, dtype=config.torch_dtype, device=self.device)
        self.v_cache = torch.zeros(shape, dtype=config.torch_dtype, device=self.device)
        self.sampler = Sampler(config.seed, self.device)
        self.decode_graphs: DecodeGraphs | None = None
        if config.cuda_graphs:
            try:
                self.capture_decode_graphs(cuda_capture_factory())
            except RuntimeError as exc:  # e.g. a kernel that synchronises inside the capture
                log.warning("CUDA graph capture failed, decode steps run eagerly: %s", exc)
                self.decode_graphs, config.cuda_graphs = None, False

    @torch.inference_mode()
    def capture_decode_graphs(self, capture: Capture) -> None:
        """Capture decode-only steps for every batch size up to ``max_num_seqs`` and every
        block-table width the backend wants, up to ``max_model_len``."""
        max_blocks = -(-self.config.max_model_len // self.block_size)
        self.decode_graphs = DecodeGraphs(
            self._hidden_states, self.backend, self.pad_block,
            graph_batch_sizes(self.config.max_num_seqs), self.backend.graph_widths(max_blocks),
            self.device, capture,
        )

    def _hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, plan) -> torch.Tensor:
        with self._attention_kernels():
            return self.model(input_ids, positions, ForwardStep(self.backend, plan, self.k_cache, self.v_cache))

    def _attention_kernels(self):
        return sdpa_kernel(CUDA_SDPA_BACKENDS) if self.device.type == "cuda" else contextlib.nullcontext()

    def _graph_for(self, scheduled: list[ScheduledRequest], layout: StepLayout) -> GraphKey | None:
        """The captured graph that runs this step: only steps whose every segment is one
        sampled row (decodes, or one-token prompts)."""
        if self.decode_graphs is None or not all(
            s.num_new_tokens == 1 and s.completes_prefill for s in scheduled
        ):
            return None
        return self.decode_graphs.key_for(len(scheduled), layout.block_table.shape[1])

    def layout(self, scheduled: list[ScheduledRequest]) -> tuple[list[int], torch.Tensor, StepLayout]:
        """Token ids, positions and the attention layout of the packed batch."""
        token_ids: list[int] = []
        cu_seqlens_q = [0]
        num_cached: list[int] = []
        seq_lens_k: list[int] = []
        block_tables: list[list[int]] = []
        for item in scheduled:
            request = item.request
            start = request.num_computed_tokens
            end = start + item.num_new_tokens
            if end - start == 1:  # a decode: no need to build prompt + output
                token_ids.append(request.token_at(start))
            elif end <= request.num_prompt_tokens:
                token_ids.extend(request.prompt_token_ids[start:end])
            else:
                token_ids.extend(request.all_token_ids[start:end])
            cu_seqlens_q.append(cu_seqlens_q[-1] + item.num_new_tokens)
            num_cached.append(start)
            seq_lens_k.append(end)
            block_tables.append(request.block_ids)
        device = self.device
        rows = cu_seqlens_q[-1]
        counts = torch.tensor([s.num_new_tokens for s in scheduled], device=device)
        segment = torch.repeat_interleave(torch.arange(len(scheduled), device=device), counts)
        first_row = torch.tensor(cu_seqlens_q[:-1], device=device)
        first_pos = torch.tensor(num_cached, device=device)
        positions = torch.arange(rows, device=device) - first_row[segment] + first_pos[segment]
        width = max(len(t) for t in block_tables)
        tables = torch.tensor([t + [t[0]] * (width - len(t)) for t in block_tables], device=device)
        bs = self.block_size
        slot_mapping = tables[segment, positions // bs] * bs + positions % bs
        layout = StepLayout(cu_seqlens_q, num_cached, seq_lens_k, tables, slot_mapping)
        return token_ids, positions, layout

    @torch.inference_mode()
    def execute(self, scheduled: list[ScheduledRequest], timer: PhaseTimer) -> list[int | None]:
        """Run the step; return the sampled token of each segment (None: prefill chunk)."""
        with timer.phase("prepare", device_work=True):
            token_ids, positions, layout = self.layout(scheduled)
            input_ids = torch.tensor(token_ids, device=self.device)
            sample_at = [i for i, s in enumerate(scheduled) if s.completes_prefill]
            graph = self._graph_for(scheduled, layout)
            if graph is None:
                plan = self.backend.plan(layout, self.device)
                logits_rows = torch.tensor(
                    [layout.cu_seqlens_q[i + 1] - 1 for i in sample_at], dtype=torch.long, device=self.device
                )
        with timer.phase("forward", device_work=True):
            if graph is not None:
                hidden = self.decode_graphs.run(graph, input_ids, positions, layout)
            else:
                hidden = self._hidden_states(input_ids, positions, plan)[logits_rows]
            logits = self.model.compute_logits(hidden)
        with timer.phase("sample", device_work=True):
            requests = [scheduled[i].request for i in sample_at]
            sampled = self.sampler(
                logits, [r.sampling_params for r in requests], [r.generator for r in requests]
            ) if sample_at else []
        tokens: list[int | None] = [None] * len(scheduled)
        for i, token in zip(sample_at, sampled, strict=True):
            tokens[i] = token
        return tokens
