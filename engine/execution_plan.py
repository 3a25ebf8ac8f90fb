"""ExecutionPlan: which kernels an engine runs, read once when its model runner is built.

The choices are made where the knowledge is (llama.py fuses layers, prepacked.py picks a linear
kernel per dtype and CPU, model_runner.py falls back from the CPU attention kernel to torch's,
cpu_kernels.py builds the C library or does not); this module reads the result off the loaded
model once, so that a log line at start, the dashboard's header details and every record's
``source["plan"]`` say the same thing, and a screenshot or a trace tells which kernels ran.
``batch_invariant`` may change between steps (a presenter control): records carry the value of
their own step.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from . import cpu_kernels
from .models.prepacked import KernelLinear, PrepackedLinear


@dataclass(frozen=True)
class ExecutionPlan:
    device: str
    dtype: str
    linear: str  # "c-kernel" (fp32 or bf16 "c-kernel/amx|pairs|widen"), "onednn", "torch"
    attention: str  # the attention backend that runs: "cpu" (C kernel), "torch", "flash_attn"
    fused_layers: bool  # every decoder layer as one C call (fused_layers.py)
    fused_ops: bool  # norms, SiLU and rotary through the C kernels
    cuda_graphs: bool

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        fused = "fused layers" if self.fused_layers else "fused ops" if self.fused_ops else "unfused"
        graphs = ", CUDA graphs" if self.cuda_graphs else ""
        return (f"{self.device} {self.dtype}: linears {self.linear}, attention {self.attention}, "
                f"{fused}{graphs}")


def linear_kind(model: torch.nn.Module) -> str:
    """What the model's linear layers run on, read from the modules themselves."""
    kinds = {type(m) for m in model.modules()}
    if KernelLinear in kinds:
        dtype = next(p.dtype for p in model.parameters())
        return f"c-kernel/{cpu_kernels.bf16_kernel()}" if dtype == torch.bfloat16 else "c-kernel"
    return "onednn" if PrepackedLinear in kinds else "torch"


def read_plan(model: torch.nn.Module, backend_name: str, device: torch.device, dtype: torch.dtype,
              cuda_graphs: bool) -> ExecutionPlan:
    first = model.layers[0]
    return ExecutionPlan(
        device=device.type, dtype=str(dtype).removeprefix("torch."), linear=linear_kind(model),
        attention=backend_name,
        fused_layers=getattr(model, "fused_layers", None) is not None and backend_name == "cpu",  # (llama.py)
        fused_ops=bool(getattr(first.mlp, "fused", False)), cuda_graphs=cuda_graphs)
