"""Batchscope's CPU kernels (``csrc/``): built once with the machine's C compiler, called through
ctypes on tensors' memory.

Why C: on CPU the torch backend copies every attended block out of the paged cache
(``index_select``) before SDPA, once per layer, so each step moves its KV three times; for
decodes that copy and torch's flash kernel at one query per row cost more than the step's GEMMs
at 24 rows, and a decoder layer's norms, rotary, SiLU and residual adds are ~25 small torch ops,
whose dispatch is most of their cost at decode sizes. ``paged_attention.c`` reads keys and values
in place through the block table (as vLLM's CPU attention does); ``elementwise.c`` fuses RMSNorm
with its residual add, and SiLU with its product; ``gemm.c`` is a linear layer on weights packed
in 32-column panels, and ``gemm_bf16.c`` its bf16 twin on the CPU's bf16 dot products
(AVX512-BF16), both faster than oneDNN's at every row count measured (models/prepacked.py). Where
the CPU has AMX tiles, bf16 layers run on them instead (``gemm_amx.c``), and so does the attention
of bf16 prefill chunks (``attention_amx.c``, called by ``paged_attention.c``).

The library needs only libc and OpenMP: it builds in about a second (``-O3 -march=native
-fopenmp``, no torch headers) into ``$BATCHSCOPE_CACHE/kernels``, keyed by the sources, the
compiler and the CPU, and links the OpenMP runtime torch already loaded, so both share one
thread pool. Without a compiler (or on a build error) ``load()`` returns None and the engine
keeps torch's ops, saying why once; with ``BATCHSCOPE_REQUIRE_KERNELS=1`` (CI) it raises instead.
The sources build with GCC 11 and later, and clang (vec.h's SHUFFLE).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from . import host_memory

log = logging.getLogger(__name__)
SOURCES = Path(__file__).with_name("csrc")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=gnu11")
P, I64, INT, F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
SIGNATURES = {
    "bs_paged_attention": [
        P, I64, P, I64, P, I64,  # this step's k and v (fp32) with their row strides, their slots (int64), rows
        P, I64, P, P, P, INT,  # q, its row stride, out, k cache, v cache, bf16 cache
        P, P, P, P, I64,  # row_start, row_count, num_cached, tables, table stride
        INT, INT, INT, INT, INT,  # segments, heads, kv heads, head dim, block size
        F32, INT, INT, INT,  # scale, max keys, invariant (row by row only), threads
    ],
    "bs_add_rms_norm": [P, P, P, P, I64, I64, F32, INT],  # x, delta, weight, out, rows, hidden, eps, threads
    "bs_silu_mul": [P, P, I64, I64, INT],  # gate_up, out, rows, intermediate, threads
    "bs_rotary": [P, I64, I64, INT, INT, P, P, INT],  # q/k, row stride, rows, heads, dim, cos, signed sin, threads
    "bs_pack_linear": [P, INT, I64, I64, P],  # weight, bf16, out features, in features, packed
    "bs_linear": [P, I64, P, INT, P, P, I64, I64, I64, INT],  # x, stride, packed, bf16, bias, out, m, n, k, threads
    "bs_linear_bf16_pairs_available": [],
    "bs_pack_linear_pairs": [P, I64, I64, P],  # weight (bf16), out features, in features, packed
    "bs_linear_bf16_pairs": [P, I64, P, P, P, I64, I64, I64, INT],  # x, stride, packed, bias, out, m, n, k, threads
    "bs_amx_available": [],
    "bs_amx_depth": [I64],  # in features -> padded to whole tile rows
    "bs_pack_linear_amx": [P, I64, I64, P],  # weight (bf16), out features, in features, packed
    "bs_linear_amx": [P, I64, P, P, P, I64, I64, I64, INT],  # x, stride, packed, bias, out, m, n, k, threads
    "bs_decoder_layer": [P, P, P, P, P],  # layer, step (models/fused_layers.py), x, k cache, v cache
}
RETURNS_INT = {"bs_paged_attention", "bs_linear_bf16_pairs_available", "bs_linear_bf16_pairs", "bs_amx_available",
               "bs_linear_amx", "bs_decoder_layer"}
RETURNS_I64 = {"bs_amx_depth"}
BF16_KERNELS = ("amx", "pairs", "widen")  # the fastest first (see bf16_kernel)
LINEAR_PANEL = 32  # output columns per packed panel (csrc/gemm.c)


def cache_dir() -> Path:
    root = os.environ.get("BATCHSCOPE_CACHE") or Path.home() / ".cache" / "batchscope"
    return Path(root) / "kernels"


def _cpu_flags() -> bytes:
    try:
        return next(line for line in Path("/proc/cpuinfo").read_bytes().splitlines() if line.startswith(b"flags"))
    except (OSError, StopIteration):
        return b""


REQUIRE_KERNELS = "BATCHSCOPE_REQUIRE_KERNELS"
_override: list[ctypes.CDLL] = []  # a library swapped in by ``using`` (benchmarks/lockstep.py)


def load() -> ctypes.CDLL | None:
    """The library the kernels run on: this tree's build (``built()``), or the one ``using`` swapped in."""
    return _override[-1] if _override else built()


@contextlib.contextmanager
def using(library: ctypes.CDLL) -> Iterator[None]:
    """Run the kernels on ``library`` (from ``open_library``) within the block: the engine looks the
    library up at each call, so one process can step two builds in turn (benchmarks/lockstep.py).
    The packed weights stay the current build's: a library swapped in must share its packed layout."""
    _override.append(library)
    try:
        yield
    finally:
        _override.pop()


@functools.cache
def built() -> ctypes.CDLL | None:
    """This tree's library, built on first use, or None where it cannot be built here."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return _without_kernels("no C compiler")
    files = sorted(SOURCES.glob("*.[ch]"))
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files) + " ".join((compiler, *FLAGS)).encode()
                            + _cpu_flags())
    target = cache_dir() / f"batchscope-cpu-{digest.hexdigest()[:16]}.so"
    try:
        if not target.exists():
            build(compiler, [f for f in files if f.suffix == ".c"], target)
        return open_library(target)
    except (OSError, subprocess.SubprocessError) as exc:
        return _without_kernels(f"the CPU kernels did not build: {getattr(exc, 'stderr', '') or exc}")


def _without_kernels(why: str) -> None:
    """Run on torch's ops, saying why; an error instead where ``BATCHSCOPE_REQUIRE_KERNELS=1``
    (CI: a C regression must fail the build, not show up as a slower green run)."""
    if os.environ.get(REQUIRE_KERNELS) == "1":
        raise RuntimeError(f"{REQUIRE_KERNELS}=1 and {why}")
    log.warning("%s: the CPU kernels are off, torch's ops are used instead", why)
    return None


def open_library(path: Path) -> ctypes.CDLL:
    """A built library with every kernel's signature declared."""
    library = ctypes.CDLL(str(path))
    for name, argtypes in SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int if name in RETURNS_INT else I64 if name in RETURNS_I64 else None
    return library


def build(compiler: str, sources: list[Path], target: Path) -> None:
    """Compile into a temporary file, then move it in place (concurrent builders are safe)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        subprocess.run([compiler, *FLAGS, *map(str, sources), "-o", str(built)], check=True,
                       capture_output=True, text=True, timeout=120)
        os.replace(built, target)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x += delta`` in place (unless None), then RMSNorm of ``x`` with ``weight`` (a new tensor)."""
    out = torch.empty_like(x)
    load().bs_add_rms_norm(x.data_ptr(), None if delta is None else delta.data_ptr(), weight.data_ptr(),
                           out.data_ptr(), x.shape[0], x.shape[1], eps, torch.get_num_threads())
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of a fused ``[rows, 2 * intermediate]`` projection."""
    rows, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(rows, inter, dtype=gate_up.dtype)
    load().bs_silu_mul(gate_up.data_ptr(), out.data_ptr(), rows, inter, torch.get_num_threads())
    return out


def rotary(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotary embedding in place on ``qk [rows, heads, dim]`` (a row-strided view with contiguous
    heads), with ``cos`` and signed ``sin`` whose memory is ``[rows, dim]``."""
    rows, heads, dim = qk.shape
    load().bs_rotary(qk.data_ptr(), qk.stride(0), rows, heads, dim, cos.data_ptr(), sin.data_ptr(),
                     torch.get_num_threads())


def takes_linear(weight: torch.Tensor) -> bool:
    """Whether ``linear`` runs this weight: built here, and fp32 or bf16 on the CPU."""
    return load() is not None and weight.dtype in (torch.float32, torch.bfloat16) and weight.device.type == "cpu"


def amx() -> bool:
    """Whether the kernels may use AMX tiles here (the CPU has them, Linux granted the tile state)."""
    return load() is not None and bool(load().bs_amx_available())


@functools.cache
def bf16_kernel() -> str:
    """Which kernel runs bf16 layers here: ``amx`` (AMX tiles, gemm_amx.c), ``pairs`` (AVX512-BF16 dot
    products, gemm_bf16.c) or ``widen`` (bf16 weights widened to fp32 in gemm.c): the fastest this
    CPU and kernel allow, or ``BATCHSCOPE_BF16_KERNEL`` where that names one that runs here (tests
    and benchmarks compare them). Measured over SmolLM2-135M's linears, 1 thread: AMX 1.6x oneDNN
    at 1 row, 1.5x at 16, 1.4x at 24, 1.15x at 64, 1.2x at 256; the dot products fall behind oneDNN
    from 8 rows on."""
    library = load()
    runs = {"amx": amx(), "pairs": bool(library.bs_linear_bf16_pairs_available()),
            "widen": True}
    wanted = os.environ.get("BATCHSCOPE_BF16_KERNEL")
    if wanted is not None and not runs.get(wanted):
        raise ValueError(f"BATCHSCOPE_BF16_KERNEL={wanted!r} does not run here; here: "
                         f"{[name for name in BF16_KERNELS if runs[name]]}")
    return wanted or next(name for name in BF16_KERNELS if runs[name])


def pack_linear(weight: torch.Tensor) -> torch.Tensor:
    """``weight [out, in]`` in the kernel's panel layout (same dtype), ``out`` padded with zero rows
    to whole 32-column panels; bf16 on dot products: depth pairs side by side, ``in`` padded to even;
    bf16 on AMX: tiles in pair layout, ``in`` padded to a multiple of 32."""
    out_features, in_features = weight.shape
    padded = -(-out_features // LINEAR_PANEL) * LINEAR_PANEL
    weight = F.pad(weight, (0, 0, 0, padded - out_features)).contiguous()
    kernel = bf16_kernel() if weight.dtype == torch.bfloat16 else "widen"
    if kernel == "amx":
        packed = host_memory.zeros((padded, load().bs_amx_depth(in_features)), torch.bfloat16)
        load().bs_pack_linear_amx(weight.data_ptr(), padded, in_features, packed.data_ptr())
        return packed
    if kernel == "pairs":
        packed = host_memory.zeros((padded, (in_features + 1) // 2 * 2), torch.bfloat16)
        load().bs_pack_linear_pairs(weight.data_ptr(), padded, in_features, packed.data_ptr())
        return packed
    packed = host_memory.zeros(tuple(weight.shape), weight.dtype)
    load().bs_pack_linear(weight.data_ptr(), int(weight.dtype == torch.bfloat16), padded, in_features,
                          packed.data_ptr())
    return packed


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int) -> torch.Tensor:
    """``x [rows, in]`` (fp32, any row stride) times the packed weight, plus ``bias`` (fp32, as long
    as the packed rows): fp32 ``[rows, out]``."""
    if x.dtype != torch.float32 or x.stride(-1) != 1:
        x = x.float().contiguous()
    rows, in_features = x.shape
    padded = packed.shape[0]
    out = torch.empty(rows, padded)
    library, bias_ptr, threads = load(), None if bias is None else bias.data_ptr(), torch.get_num_threads()
    kernel = bf16_kernel() if packed.dtype == torch.bfloat16 else "widen"
    if kernel != "widen":
        call = library.bs_linear_amx if kernel == "amx" else library.bs_linear_bf16_pairs
        if call(x.data_ptr(), x.stride(0), packed.data_ptr(), bias_ptr, out.data_ptr(), rows, padded, in_features,
                threads) != 0:
            raise MemoryError("the bf16 linear kernel could not allocate its bf16 copy of x")
    else:
        library.bs_linear(x.data_ptr(), x.stride(0), packed.data_ptr(), int(packed.dtype == torch.bfloat16), bias_ptr,
                          out.data_ptr(), rows, padded, in_features, threads)
    return out if padded == out_features else out[:, :out_features].contiguous()
