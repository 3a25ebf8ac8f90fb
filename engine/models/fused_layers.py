"""The decoder layers as one C call each (``csrc/decoder_layer.c``), on the CPU kernels' path.

Why: with the CPU kernels a layer is about twelve Python -> C calls (norms, four linears, rotary,
attention, SiLU, residual adds), each with its module call, argument conversion and output
allocation: ~130 us a layer, ~4 ms a step over SmolLM2's 30 layers, as much as a small decode
step's arithmetic. ``decoder_layer.c`` runs the same kernels in the same order on the same data,
so the results are the same bits as ``DecoderLayer.forward``; a layer's weights and sizes are
described to C once (``LayerDesc``), a step's plan and scratch rows once per forward (``StepDesc``).

Used where every layer can be: fp32 activations with the fused norms, SiLU and rotary on, the four
linears on the C kernel with whole 32-column panels, no per-head q/k norms (Qwen3), and the CPU
attention backend; otherwise the layers run one module at a time.
"""
from __future__ import annotations

import ctypes

import torch

from .. import cpu_kernels
from ..cpu_kernels import LayerDesc, LinearDesc, StepDesc  # (checked against the C structs at load)
from .prepacked import KernelLinear


def _linear(module) -> LinearDesc | None:
    if not isinstance(module, KernelLinear) or module.packed.shape[0] != module.out_features:
        return None
    bias = None if module.bias is None else module.bias.data_ptr()
    return LinearDesc(module.packed.data_ptr(), bias, module.out_features, module.in_features)


def _kernel(weight: torch.Tensor) -> int:
    return cpu_kernels.LINEAR_KERNELS["fp32" if weight.dtype == torch.float32 else cpu_kernels.bf16_kernel()]


def layer_desc(layer) -> LayerDesc | None:
    """The layer described to C, or None where decoder_layer.c cannot run it."""
    attn, mlp = layer.self_attn, layer.mlp
    linears = [_linear(m) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)]
    norms = (layer.input_layernorm.fused_weight, layer.post_attention_layernorm.fused_weight)
    if None in linears or None in norms or attn.qk_norm or not (attn.fused_rotary and mlp.fused) \
            or attn.num_heads > cpu_kernels.MAX_HEADS:  # (the model runner then picks torch's attention)
        return None
    return LayerDesc(*linears, norms[0].data_ptr(), norms[1].data_ptr(), layer.input_layernorm.eps,
                     _kernel(attn.qkv_proj.packed), attn.num_heads, attn.num_kv_heads, attn.head_dim)


class FusedLayers:
    """``x`` through every layer, one C call a layer; the same bits as the modules."""

    def __init__(self, layers, descs: list[LayerDesc]):
        self.layers, self.descs = layers, descs  # (the modules own the tensors the descs point into)
        attn = layers[0].self_attn
        self.scale, self.q_size = attn.scale, attn.num_heads * attn.head_dim
        self.qkv_out, self.inter = descs[0].qkv.out, descs[0].down.in_

    @classmethod
    def of(cls, layers) -> FusedLayers | None:
        descs = [layer_desc(layer) for layer in layers]
        return None if None in descs else cls(layers, descs)

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, step,
                 keep: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` after every layer; with ``keep`` (increasing int64 row indices), those rows only
        (the last layer takes only them past attention: ``DecoderLayer.forward``)."""
        if keep is not None and (keep.dtype != torch.int64 or not keep.is_contiguous()):
            raise ValueError(f"keep must be a contiguous int64 tensor of row indices, got {keep.dtype}")
        rows, hidden = x.shape
        widths = (hidden, self.qkv_out, self.q_size, 2 * self.inter, self.inter, hidden)
        scratch = [torch.empty(rows, n) for n in widths]  # h, qkv, attention, gate/up, SiLU x up, delta
        desc = self._step(rows, cos, sin, step, scratch)
        k_cache, v_cache = step.k_cache, step.v_cache
        layer_bytes = k_cache.stride(0) * k_cache.element_size()
        run = cpu_kernels.load().bs_decoder_layer
        last = len(self.descs) - 1
        for i, layer in enumerate(self.descs):
            kept = keep if i == last else None
            status = run(ctypes.byref(layer), ctypes.byref(desc), x.data_ptr(),
                         k_cache.data_ptr() + i * layer_bytes, v_cache.data_ptr() + i * layer_bytes,
                         None if kept is None else kept.data_ptr(), 0 if kept is None else kept.numel())
            if status != 0:
                raise RuntimeError(f"the fused decoder layer {i} failed (status {status})")
        return x if keep is None else x[:keep.numel()]

    def _step(self, rows: int, cos, sin, step, scratch: list[torch.Tensor]) -> StepDesc:
        plan, k_cache = step.plan, step.k_cache
        return StepDesc(
            rows, cos.data_ptr(), sin.data_ptr(), plan.slot_mapping.data_ptr(), plan.row_start.data_ptr(),
            plan.row_count.data_ptr(), plan.num_cached.data_ptr(), plan.tables.data_ptr(), plan.tables.shape[1],
            plan.row_start.shape[0], k_cache.shape[2], plan.max_keys, int(plan.batch_invariant),
            int(k_cache.dtype == torch.bfloat16), torch.get_num_threads(), self.scale,
            *(t.data_ptr() for t in scratch))
