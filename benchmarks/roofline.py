"""The machine's ceilings in this run: matmul peak and memory bandwidth, and the useful work
(FLOPs, bytes) of a step of the model, to express a step as a fraction of the ceiling."""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class ModelShapes:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, config) -> ModelShapes:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                   config.num_attention_heads, config.num_key_value_heads, head_dim, config.vocab_size)

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each fused linear layer the engine runs per decoder layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {
            "qkv": (self.hidden, q + 2 * kv),
            "o": (q, self.hidden),
            "gate_up": (self.hidden, 2 * self.intermediate),
            "down": (self.intermediate, self.hidden),
        }

    @property
    def linear_params(self) -> int:
        """Weights every row multiplies through (all decoder layers, LM head excluded)."""
        return self.layers * sum(i * o for i, o in self.linear_shapes().values())

    def kv_bytes_per_token(self, itemsize: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * itemsize

    def to_dict(self) -> dict:
        return asdict(self)


def step_flops(shapes: ModelShapes, segments, num_sampled: int) -> float:
    """Useful FLOPs of one packed step: linear layers on every row, causal attention on the
    keys each query really sees, and the LM head on the sampled rows."""
    rows = sum(s.num_rows for s in segments)
    flops = 2.0 * rows * shapes.linear_params
    for s in segments:  # query j of a segment sees num_cached + j + 1 keys
        keys = s.num_rows * s.num_cached + s.num_rows * (s.num_rows + 1) / 2
        flops += 4.0 * shapes.layers * shapes.heads * shapes.head_dim * keys
    return flops + 2.0 * num_sampled * shapes.hidden * shapes.vocab


def step_kv_bytes(shapes: ModelShapes, segments, itemsize: int) -> float:
    return sum(s.num_keys for s in segments) * shapes.kv_bytes_per_token(itemsize)


def weight_bytes(shapes: ModelShapes, itemsize: int) -> float:
    """Bytes a decode step must read at least: every weight once (LM head included)."""
    return (shapes.linear_params + shapes.hidden * shapes.vocab) * itemsize


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def best_seconds(fn, device: torch.device, min_time: float) -> float:
    """The fastest of repeated calls of ``fn`` over at least ``min_time`` seconds (one warm-up call first)."""
    fn()
    _sync(device)
    best, spent = float("inf"), 0.0
    while spent < min_time:
        t = time.perf_counter()
        fn()
        _sync(device)
        dt = time.perf_counter() - t
        best, spent = min(best, dt), spent + dt
    return best


def linear_rates(shapes: ModelShapes, rows: int, seconds: Callable[[int, int], float]) -> dict[str, float]:
    """FLOP/s of each of the model's linear shapes at ``rows`` rows, ``seconds(in, out)`` timing one."""
    return {name: 2.0 * rows * n_in * n_out / seconds(n_in, n_out)
            for name, (n_in, n_out) in shapes.linear_shapes().items()}


def gemm_peak(shapes: ModelShapes, rows: int, dtype: torch.dtype, device: torch.device,
              min_time: float = 0.3) -> dict:
    """FLOP/s of a plain ``[rows, in] @ [in, out]`` matmul for each of the model's linear
    shapes (best of repeated runs); the peak is the fastest shape. On CPU both torch's default
    linear and the oneDNN prepacked one the engine uses are timed, and the faster one counts."""
    from engine.models.prepacked import PrepackedLinear, prepack_supported

    prepacked = device.type == "cpu" and prepack_supported(dtype)

    def seconds(n_in: int, n_out: int) -> float:
        a = torch.randn(rows, n_in, dtype=dtype, device=device)
        w = torch.randn(n_out, n_in, dtype=dtype, device=device)
        kernels = [lambda: torch.nn.functional.linear(a, w)]
        if prepacked:
            kernels.append(functools.partial(PrepackedLinear(w, None), a))
        return min(best_seconds(kernel, device, min_time) for kernel in kernels)

    rates = linear_rates(shapes, rows, seconds)
    return {"rows": rows, "flops_per_s": rates, "peak_flops_per_s": max(rates.values())}


def memory_bandwidth(device: torch.device, mbytes: int = 1024, min_time: float = 0.3) -> float:
    """Bytes/s of a device-to-device copy (read + write counted)."""
    n = mbytes * 2**20 // 4
    src = torch.empty(n, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    seconds = best_seconds(lambda: dst.copy_(src), device, min_time)
    return 2.0 * n * 4 / seconds
