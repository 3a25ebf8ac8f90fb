"""CPU linear layers whose weights are packed once, at load time: for oneDNN, or for Batchscope's
own C kernel (``KernelLinear``, csrc/gemm.c).

Why: torch's default CPU linear (MKL sgemm) repacks the weight into its blocked layout on every
call. Over the few rows of a decode step that repacking costs as much as the arithmetic, so the
engine keeps each weight in oneDNN's blocked layout instead (the ops torch.compile's CPU
"freezing" uses). On SmolLM2-135M's shapes, 2 threads, all 30 layers: 2.1x faster at 8 rows,
2.0x at 16, 1.7x at 32, 1.25x at 256 and 1.2x at 512; the 49k-row LM head 2.5-3x at 1-32 rows.
The arithmetic stays in the weights' dtype (fp32 accumulation for fp32).

Prepacking is used only where a probe at load time shows that oneDNN runs this dtype on this CPU
and agrees with ``F.linear``; otherwise the model keeps ``nn.Linear``.

The C kernel (with the CPU kernels on, ``attention_backend="cpu"``) is faster still, measured over
SmolLM2-135M's 121 linears on 2 threads, fp32: 1.8x oneDNN at 1 row, 1.5x at 8, 1.25x at 16,
1.2x at 24, 1.1x at 64 and 1.05x at 256; bf16 on the CPU's bf16 dot products (AVX512-BF16):
2.2x at 1 row, 1.8x at 8, 1.6x at 16, 1.2x at 24 and 64, 1.07x at 256 (and its output is not
rounded to bf16). A row's result never depends on the other rows of the call. On a CPU without
bf16 dot products, bf16 weights are widened to fp32 in registers (faster than oneDNN up to 8
rows, slower above: the price of one kernel whose rows never depend on each other).
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from .. import cpu_kernels

PREPACK_DTYPES = (torch.float32, torch.bfloat16)


class PrepackedLinear(nn.Module):
    """``F.linear`` with a weight in oneDNN's layout; inputs are ``[rows, in_features]``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.dtype = weight.dtype
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
        self.bias = None if bias is None else bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """In the weight's dtype; an input in another dtype (fp32 activations of a bf16 model)
        is converted in and the output back."""
        out = torch.ops.mkldnn._linear_pointwise(x.to(self.dtype).contiguous(), self.packed, self.bias, "none", [], "")
        return out.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN prepacked"


@functools.cache
def prepack_supported(dtype: torch.dtype) -> bool:
    """Whether oneDNN runs a prepacked linear in ``dtype`` here, matching ``F.linear``."""
    if dtype not in PREPACK_DTYPES or not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 64, generator=generator).to(dtype)
    bias = torch.randn(96, generator=generator).to(dtype)
    x = torch.randn(5, 64, generator=generator).to(dtype)
    try:
        got = PrepackedLinear(weight, bias)(x)
    except (RuntimeError, AttributeError):
        return False
    tolerance = 1e-4 if dtype == torch.float32 else 5e-2
    return torch.allclose(got.float(), F.linear(x, weight, bias).float(), atol=tolerance, rtol=tolerance)


class KernelLinear(nn.Module):
    """``F.linear`` through the C kernel (``cpu_kernels.linear``); fp32 inputs ``[rows, in]`` and
    outputs; a row's result never depends on the other rows of the call."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed = cpu_kernels.pack_linear(weight.detach())
        padding = self.packed.shape[0] - self.out_features  # the kernel's panels are whole
        self.bias = None if bias is None else F.pad(bias.detach().float(), (0, padding)).contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cpu_kernels.linear(x, self.packed, self.bias, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, C kernel ({self.packed.dtype})"


def make_linear(weight: torch.Tensor, bias: torch.Tensor | None, kernels: bool) -> nn.Module:
    """The CPU linear for this weight: the C kernel with the CPU kernels on, else oneDNN's where it
    runs this dtype, else None (the caller keeps its ``nn.Linear``)."""
    if kernels and cpu_kernels.takes_linear(weight):
        return KernelLinear(weight, bias)
    if prepack_supported(weight.dtype):
        return PrepackedLinear(weight, bias)
    return None


def prepack_linears(module: nn.Module, kernels: bool = False) -> int:
    """Replace every ``nn.Linear`` under ``module`` by a packed one (``make_linear``); returns how
    many. Call after the weights are loaded and the module is on CPU in its final dtype."""
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            packed = make_linear(child.weight, child.bias, kernels)
            if packed is not None:
                setattr(module, name, packed)
                count += 1
        else:
            count += prepack_linears(child, kernels)
    return count
