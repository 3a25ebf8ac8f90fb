"""ModelRunner: turns one scheduled step into one forward pass and one token per request.

Design note. The scheduled requests are packed into a single ragged batch with no padding:
segment ``i`` contributes its ``num_new_tokens`` rows (a decode 1 row, a prompt chunk many),
so ``[A:1, B:1, C:100]`` is a ``[102, hidden]`` tensor and every linear layer is one GEMM over
all 102 rows. Alongside the token ids the runner builds, with tensor ops rather than loops
over tokens, each row's position and its slot in the paged KV cache (the slot mapping), plus
``cu_seqlens_q``, the key length of each segment and its block table; the attention backend
turns these into its plan once per step and uses it in every layer, so attention is the only
place where requests stay apart. Only the rows whose logits are needed (each decode, and the
last row of a prefill that completes) go on past the last layer's attention (every row's keys
and values are written there as in any layer) and through the LM head; the logits are split
back per request and sampled in one vectorised call. On CUDA the forward pass
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

from . import host_memory
from .attention import StepLayout, make_backend
from .config import EngineConfig
from .cuda_graphs import Capture, DecodeGraphs, GraphKey, cuda_capture_factory, graph_batch_sizes
from .execution_plan import read_plan
from .loader import LoadedModel
from .packing import PackedStep
from .sampler import SampledStep, Sampler, token_logprobs
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


def _rows_to_keep(packed: PackedStep, device: torch.device) -> torch.Tensor | None:
    """The rows whose logits are sampled, or None where that is every row (decodes only: the
    rows are distinct and increasing, so as many as the step's rows means all of them)."""
    rows = packed.logits_rows
    return None if len(rows) == packed.num_rows else torch.tensor(rows, dtype=torch.long, device=device)


class ModelRunner:
    def __init__(self, loaded: LoadedModel, config: EngineConfig):
        self.model = loaded.model
        self.config = config
        self.device = torch.device(config.device)
        self.block_size = config.block_size
        attn = self.model.layers[0].self_attn
        self.backend, self.attention_fallback = self._backend(attn)
        self.model.prepack_for_cpu(kernels=self.backend.name == "cpu")  # the weights' final layout
        self.pad_block = config.num_kv_blocks  # never handed out by the BlockManager
        shape = (
            len(self.model.layers),
            config.num_kv_blocks + 1,
            config.block_size,
            attn.num_kv_heads,
            attn.head_dim,
        )
        self.k_cache = self._cache_tensor(shape)
        self.v_cache = self._cache_tensor(shape)
        self.sampler = Sampler(config.seed, self.device)
        self.decode_graphs: DecodeGraphs | None = None
        if config.cuda_graphs:
            try:
                self.capture_decode_graphs(cuda_capture_factory())
            except RuntimeError as exc:  # e.g. a kernel that synchronises inside the capture
                log.warning("CUDA graph capture failed, decode steps run eagerly: %s", exc)
                self.decode_graphs = None
        self.plan = read_plan(self.model, self.backend.name, self.device, config.torch_dtype,
                              self.decode_graphs is not None)
        log.info("execution plan: %s", self.plan.summary())

    def _cache_tensor(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A zeroed K or V cache; on the CPU on huge pages (host_memory.py)."""
        if self.device.type == "cpu":
            return host_memory.zeros(shape, self.config.torch_dtype)
        return torch.zeros(shape, dtype=self.config.torch_dtype, device=self.device)

    def _backend(self, attn):
        """The configured attention backend, and why it fell back (or None): the CPU kernel falls back
        to torch's where it cannot run this model (logged; the execution plan says ``torch``)."""
        config = self.config
        backend = make_backend(config.attention_backend, config.block_size)
        why = backend.unsupported(attn.num_heads, attn.num_kv_heads, attn.head_dim, config.torch_dtype)
        if why is not None and config.batch_invariant:
            raise ValueError(f"batch_invariant=True needs the CPU kernels, which cannot run here: {why}")
        if why is not None:
            log.warning("attention backend %r cannot run here (%s): using 'torch'", backend.name, why)
            backend = make_backend("torch", config.block_size)
        return backend, why

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

    def _hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, plan,
                       keep: torch.Tensor | None = None) -> torch.Tensor:
        """Every row's hidden state, or the rows ``keep`` only (``PackedLlama.forward``)."""
        with self._attention_kernels():
            step = ForwardStep(self.backend, plan, self.k_cache, self.v_cache)
            return self.model(input_ids, positions, step, keep)

    def _attention_kernels(self):
        return sdpa_kernel(CUDA_SDPA_BACKENDS) if self.device.type == "cuda" else contextlib.nullcontext()

    def _graph_for(self, packed: PackedStep, layout: StepLayout) -> GraphKey | None:
        """The captured graph that runs this step: only steps whose every segment is one
        sampled row (decodes, or one-token prompts)."""
        decode_only = packed.num_rows == packed.num_segments == len(packed.sample_at)
        if self.decode_graphs is None or not decode_only:
            return None
        return self.decode_graphs.key_for(packed.num_segments, layout.block_table.shape[1])

    def tensors(self, packed: PackedStep) -> tuple[torch.Tensor, torch.Tensor, StepLayout]:
        """The packed step on the device: input ids, positions and the attention layout (row
        ``r`` of segment ``i`` sits at position ``num_cached[i] + r - cu_seqlens_q[i]`` and
        writes its K/V to slot ``block_table[i][position // block_size] * block_size +
        position % block_size``); built with tensor ops, no loop over tokens."""
        device = self.device
        query_lens = torch.tensor([packed.query_len(i) for i in range(packed.num_segments)], device=device)
        segment = torch.repeat_interleave(torch.arange(packed.num_segments, device=device), query_lens)
        first_row = torch.tensor(packed.cu_seqlens_q[:-1], device=device)
        first_pos = torch.tensor(packed.num_cached, device=device)
        positions = torch.arange(packed.num_rows, device=device) - first_row[segment] + first_pos[segment]
        width = max(len(t) for t in packed.block_tables)
        tables = torch.tensor([t + [t[0]] * (width - len(t)) for t in packed.block_tables], device=device)
        bs = self.block_size
        slot_mapping = tables[segment, positions // bs] * bs + positions % bs
        layout = StepLayout(packed.cu_seqlens_q, packed.num_cached, packed.seq_lens_k, tables, slot_mapping)
        return torch.tensor(packed.token_ids, device=device), positions, layout

    @torch.inference_mode()
    def execute(self, packed: PackedStep, timer: PhaseTimer, batch_invariant: bool = False) -> SampledStep:
        """Run the step; return what each segment sampled (token None: prefill chunk).
        ``batch_invariant``: this step's (a presenter may switch it between steps)."""
        with timer.phase("prepare", device_work=True):
            input_ids, positions, layout = self.tensors(packed)
            graph = self._graph_for(packed, layout)
            if graph is None:
                plan = self.backend.plan(layout, self.device, batch_invariant)
                keep = _rows_to_keep(packed, self.device)
        with timer.phase("forward", device_work=True):
            if graph is not None:
                hidden = self.decode_graphs.run(graph, input_ids, positions, layout)
            else:
                hidden = self._hidden_states(input_ids, positions, plan, keep)
            logits = self.model.compute_logits(hidden)
        with timer.phase("sample", device_work=True):
            tokens, logprobs = self._sample(logits, packed)
        step = SampledStep.empty(packed.num_segments)
        for i, token, token_lp in zip(packed.sample_at, tokens, logprobs, strict=True):
            step.tokens[i], step.logprobs[i] = token, token_lp
        return step

    def _sample(self, logits: torch.Tensor, packed: PackedStep) -> tuple[list[int], list]:
        if not packed.sample_at:
            return [], []
        params, generators = zip(*packed.sampling, strict=True)
        tokens = self.sampler(logits, list(params), list(generators))
        return tokens, token_logprobs(logits, tokens, list(params))
