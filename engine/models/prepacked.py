"""CPU linear layers whose weights are reordered once, at load time, for oneDNN.

Why: torch's default CPU linear (MKL sgemm) repacks the weight into its blocked layout on every
call. Over the few rows of a decode step that repacking costs as much as the arithmetic, so the
engine keeps each weight in oneDNN's blocked layout instead (the ops torch.compile's CPU
"freezing" uses). On SmolLM2-135M's shapes, 2 threads, all 30 layers: 2.1x faster at 8 rows,
2.0x at 16, 1.7x at 32, 1.25x at 256 and 1.2x at 512; the 49k-row LM head 2.5-3x at 1-32 rows.
The arithmetic stays in the weights' dtype (fp32 accumulation for fp32).

Prepacking is used only where a probe at load time shows that oneDNN runs this dtype on this CPU
and agrees with ``F.linear``; otherwise the model keeps ``nn.Linear``.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

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


def prepack_linears(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` under ``module`` by a ``PrepackedLinear``; returns how many.

    Call after the weights are loaded and the module is on CPU in its final dtype."""
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, PrepackedLinear(child.weight, child.bias))
            count += 1
        else:
            count += prepack_linears(child)
    return count
