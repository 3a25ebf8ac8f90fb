"""Attention backends: one call per layer attends every request of the packed batch to its
own keys only, found through its block table in the paged KV cache."""
from __future__ import annotations

from .base import AttentionBackend, StepLayout


def make_backend(name: str, block_size: int) -> AttentionBackend:
    if name == "cpu":
        from .cpu_backend import CpuKernelBackend

        return CpuKernelBackend(block_size)
    if name == "flash_attn":
        from .flash_backend import FlashAttentionBackend

        return FlashAttentionBackend(block_size)
    from .torch_backend import TorchAttentionBackend

    return TorchAttentionBackend(block_size)


__all__ = ["AttentionBackend", "StepLayout", "make_backend"]
