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
the CPU has AMX tiles, bf16 layers run on them instead (``gemm_amx.c``). The attention of bf16
prefill chunks multiplies in bf16 (``attention_pairs.c``, called by ``paged_attention.c``): on AMX
tiles, else on AVX512-BF16 dot products; so does that of bf16 decode rows on AVX512-BF16
(``decode_pairs.c``). ``argmax.c`` is greedy sampling's argmax (torch's choice
on ties and NaN, in a third of its time); ``nucleus.c`` top-p's threshold without sorting the vocabulary.

The library needs only libc and OpenMP: it builds in about a second (``-O3 -march=native
-fopenmp``, no torch headers) into ``$BATCHSCOPE_CACHE/kernels``, keyed by the sources, the
compiler and the CPU, and links the OpenMP runtime torch already loaded, so both share one
thread pool. Without a compiler (or on a build error) ``load()`` returns None and the engine
keeps torch's ops, saying why once; with ``BATCHSCOPE_REQUIRE_KERNELS=1`` (CI) it raises instead.
The kernels' vectors are the CPU's registers (csrc/vec.h): 16 floats with AVX-512, 8 with AVX2 and
FMA (most laptops). On a CPU with neither they build, but GCC keeps their vectors in memory, so the
engine keeps torch's ops there, saying so (``unfit``; not an error under ``BATCHSCOPE_REQUIRE_KERNELS``).
The sources build with GCC 11 and later, and clang (vec.h's SHUFFLE).

The interface is checked, not trusted: ``csrc/batchscope.h`` declares every export and every struct
that crosses it; at load the library's ABI version and its table of struct sizes, field offsets and
constants (``csrc/interface.c``) must equal what the ctypes mirrors below give, or the library is
refused (an ``InterfaceError``: a silent mismatch would read the wrong fields; so is a library that
lacks an export, e.g. an older build a benchmark compares against); the wrappers check
dtype, device, layout and sizes before passing a tensor's address to C.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

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
    "bs_argmax_rows": [P, I64, I64, I64, P, INT],  # x, rows, columns, row stride, out (int64), threads
    "bs_nucleus_thresholds": [P, I64, I64, P, P, INT],  # probs, rows, vocab, top_p (fp64), theta (fp32), threads
    # x, delta, weight, out, out in bf16, rows, hidden, eps, threads
    "bs_add_rms_norm": [P, P, P, P, INT, I64, I64, F32, INT],
    "bs_silu_mul": [P, P, INT, I64, I64, INT],  # gate_up, out, out in bf16, rows, intermediate, threads
    "bs_rotary": [P, I64, I64, INT, INT, P, P, INT],  # q/k, row stride, rows, heads, dim, cos, signed sin, threads
    "bs_pack_linear": [P, INT, I64, I64, P],  # weight, bf16, out features, in features, packed
    "bs_linear": [P, I64, P, INT, P, P, I64, I64, I64, INT],  # x, stride, packed, bf16, bias, out, m, n, k, threads
    "bs_linear_bf16_pairs_available": [],
    "bs_pack_linear_pairs": [P, I64, I64, P],  # weight (bf16), out features, in features, packed
    "bs_linear_bf16_pairs": [P, I64, P, P, P, I64, I64, I64, INT],  # x, stride, packed, bias, out, m, n, k, threads
    "bs_linear_bf16_rows": [P, P, P, P, I64, I64, I64, INT],  # x (bf16), packed, bias, out, m, n, k, threads
    "bs_amx_available": [],
    "bs_prefill_attention_pairs_available": [],
    "bs_decode_pairs_takes": [INT],  # head dim
    "bs_amx_depth": [I64],  # in features -> padded to whole tile rows
    "bs_pack_linear_amx": [P, I64, I64, P],  # weight (bf16), out features, in features, packed
    "bs_linear_amx": [P, I64, P, P, P, I64, I64, I64, INT],  # x, stride, packed, bias, out, m, n, k, threads
    "bs_decoder_layer": [P, P, P, P, P, P, I64],  # layer, step (models/fused_layers.py), x, k/v cache, keep, kept
}
RETURNS_INT = {"bs_paged_attention", "bs_linear_bf16_pairs_available", "bs_linear_bf16_pairs", "bs_linear_bf16_rows",
               "bs_amx_available", "bs_nucleus_thresholds", "bs_prefill_attention_pairs_available",
               "bs_decode_pairs_takes", "bs_linear_amx", "bs_decoder_layer"}
RETURNS_I64 = {"bs_amx_depth"}
BF16_KERNELS = ("amx", "pairs", "widen")  # the fastest first (see bf16_kernel)
LINEAR_PANEL = 32  # output columns per packed panel (csrc/gemm.c)
ABI_VERSION = 3  # batchscope.h's BS_ABI_VERSION
MAX_HEADS, MAX_DIM = 128, 256  # query heads and head dim paged attention holds (BS_MAX_HEADS, BS_MAX_DIM)
LINEAR_KERNELS = {"fp32": 0, "widen": 1, "pairs": 2, "amx": 3}  # a fused layer's linear kernel (LINEAR_*)


class LinearDesc(ctypes.Structure):  # batchscope.h's structs, checked against the library at load
    _fields_ = [("weight", P), ("bias", P), ("out", I64), ("in_", I64)]


class LayerDesc(ctypes.Structure):
    _fields_ = [("qkv", LinearDesc), ("o", LinearDesc), ("gate_up", LinearDesc), ("down", LinearDesc),
                ("norm1", P), ("norm2", P), ("eps", F32), ("kernel", INT), ("heads", INT), ("kv_heads", INT),
                ("dim", INT)]


class StepDesc(ctypes.Structure):
    _fields_ = [("rows", I64), ("cos", P), ("sin", P), ("slots", P), ("row_start", P), ("row_count", P),
                ("num_cached", P), ("tables", P), ("table_stride", I64), ("segments", INT), ("block_size", INT),
                ("max_keys", INT), ("invariant", INT), ("bf16_cache", INT), ("threads", INT), ("scale", F32),
                ("h", P), ("qkv", P), ("attn", P), ("gate_up", P), ("act", P), ("delta", P)]


class InterfaceFact(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", I64)]


MIRRORED = (LinearDesc, LayerDesc, StepDesc)


class InterfaceError(RuntimeError):
    """The built library and this module disagree on the C interface."""


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


def why_off() -> str | None:
    """Why the kernels do not run here (None where they do), as ``here()`` logged it."""
    return None if load() is not None else here().reason or "the CPU kernels are off"


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


def compiler() -> str | None:
    """The C compiler the kernels are built with: $CC, else gcc or cc on the PATH."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


class Here(NamedTuple):
    """This tree's library on this machine, or None and the reason."""
    library: ctypes.CDLL | None
    reason: str | None = None


def built() -> ctypes.CDLL | None:
    """This tree's library, built on first use, or None where it cannot be built (or run well) here."""
    return here().library


@functools.cache
def here() -> Here:
    """This tree's library built, checked and fit for this CPU, once; or why not (logged, or raised
    where kernels are required)."""
    cc = compiler()
    if cc is None:
        return _without_kernels("no C compiler")
    try:
        library = this_tree(cc)
        check_interface(library)
    except (OSError, subprocess.SubprocessError) as exc:
        return _without_kernels(f"the CPU kernels did not build: {getattr(exc, 'stderr', '') or exc}")
    except InterfaceError as exc:
        return _without_kernels(str(exc))
    return Here(library) if (reason := unfit(library)) is None else Here(None, reason)


def this_tree(cc: str) -> ctypes.CDLL:
    """This tree's sources built with ``cc`` (cached) and opened; not yet checked."""
    return open_library(cached_build(cc, "batchscope-cpu", sorted(SOURCES.glob("*.[ch]"))))


def vector_bits(library: ctypes.CDLL) -> tuple[int, int]:
    """The widest vector registers ``library`` was built for, and its kernels' vectors, in bits
    (csrc/interface.c)."""
    library.bs_vector_bits.restype = library.bs_kernel_vector_bits.restype = INT
    return library.bs_vector_bits(), library.bs_kernel_vector_bits()


def unfit(library: ctypes.CDLL) -> str | None:
    """Why the kernels' vectors do not fit this CPU's registers (logged), or None where they do. The
    kernels' vectors are 16 floats with AVX-512 and 8 with AVX2 and FMA (csrc/vec.h), 16 elsewhere:
    with narrower registers, GCC keeps every such vector in memory (on a Zen 3 host the engine ran
    17x slower on 16-float kernels than on torch's ops: BENCHMARKS.md, "A CPU without AVX-512").
    Not an error under BATCHSCOPE_REQUIRE_KERNELS: the kernels built; this CPU is not theirs."""
    bits, needed = vector_bits(library)
    if bits >= needed:
        return None
    return _off(f"this CPU's vectors are {bits}-bit, the CPU kernels' {needed}-bit (csrc/vec.h: AVX-512, or AVX2 "
                "with FMA): they would live in memory, slower than torch's ops")


def _without_kernels(why: str) -> Here:
    """Run on torch's ops, saying why; an error instead where ``BATCHSCOPE_REQUIRE_KERNELS=1``
    (CI: a C regression must fail the build, not show up as a slower green run)."""
    if os.environ.get(REQUIRE_KERNELS) == "1":
        raise RuntimeError(f"{REQUIRE_KERNELS}=1 and {why}")
    return Here(None, _off(why))


def _off(why: str) -> str:
    log.warning("%s: the CPU kernels are off, torch's ops are used instead", why)
    return why


def open_library(path: Path) -> ctypes.CDLL:
    """A built library with every kernel's signature declared; InterfaceError where one is missing."""
    library = ctypes.CDLL(str(path))
    for name, argtypes in SIGNATURES.items():
        if not hasattr(library, name):
            raise InterfaceError(f"the library has no {name}")
        function = getattr(library, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int if name in RETURNS_INT else I64 if name in RETURNS_I64 else None
    return library


def c_interface(library: ctypes.CDLL) -> dict[str, int]:
    """The library's own account of its structs and constants (csrc/interface.c)."""
    library.bs_interface.argtypes = [ctypes.POINTER(INT)]
    library.bs_interface.restype = ctypes.POINTER(InterfaceFact)
    count = INT()
    facts = library.bs_interface(ctypes.byref(count))
    return {facts[i].name.decode(): facts[i].value for i in range(count.value)}


def python_interface() -> dict[str, int]:
    """The same table from this module: the ctypes mirrors' layouts and the constants it uses."""
    facts = {"BS_MAX_HEADS": MAX_HEADS, "BS_MAX_DIM": MAX_DIM}
    facts |= {f"LINEAR_{name.upper()}": value for name, value in LINEAR_KERNELS.items()}
    for struct in MIRRORED:
        facts[f"sizeof({struct.__name__})"] = ctypes.sizeof(struct)
        for field, _ in struct._fields_:
            member, name = getattr(struct, field), field.rstrip("_")  # (``in_``: ``in`` in C)
            facts[f"offsetof({struct.__name__}, {name})"] = member.offset
            facts[f"sizeof({struct.__name__}.{name})"] = member.size
    return facts


def check_interface(library: ctypes.CDLL) -> None:
    """Refuse a library whose ABI version or layouts differ from this module's (InterfaceError)."""
    library.bs_abi_version.restype = INT
    if (version := library.bs_abi_version()) != ABI_VERSION:
        raise InterfaceError(f"the CPU kernels' ABI version is {version}, engine/cpu_kernels.py expects {ABI_VERSION}")
    c, mirrored = c_interface(library), python_interface()
    differ = [f"{name}: C {c.get(name)}, ctypes {mirrored.get(name)}" for name in sorted(c.keys() | mirrored.keys())
              if c.get(name) != mirrored.get(name)]
    if differ:
        raise InterfaceError("the CPU kernels' structs differ from their ctypes mirrors (csrc/batchscope.h, "
                             "engine/cpu_kernels.py): " + "; ".join(differ))


def cached_build(cc: str, name: str, files: list[Path]) -> Path:
    """``files`` (sources and headers) built into a shared library in the cache, once per content,
    compiler, flags and CPU: the library's path."""
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files) + " ".join((cc, *FLAGS)).encode() + _cpu_flags())
    target = cache_dir() / f"{name}-{digest.hexdigest()[:16]}.so"
    if not target.exists():
        build(cc, [f for f in files if f.suffix == ".c"], target)
    return target


def build(compiler: str, sources: list[Path], target: Path) -> None:
    """Compile into a temporary file, then move it in place (concurrent builders are safe)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        subprocess.run([compiler, *FLAGS, *map(str, sources), "-o", str(built)], check=True,
                       capture_output=True, text=True, timeout=120)
        os.replace(built, target)


def _fp32_on_cpu(name: str, tensor: torch.Tensor) -> None:
    if tensor.dtype != torch.float32:
        raise TypeError(f"{name} must be float32 for the CPU kernels, got {tensor.dtype}")
    if not tensor.is_cpu:
        raise ValueError(f"{name} must be on the CPU for the CPU kernels, got {tensor.device}")


def _operand(name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> None:
    """Refuse a tensor a kernel cannot read as ``shape`` fp32 values in the CPU's memory, row after row
    (the rows, then the size of the whole; a kernel reads the address it is given, whatever is there)."""
    if tensor.dtype == torch.float32 and tensor.is_cpu and tensor.is_contiguous() and tensor.shape == shape:
        return  # (the usual case first, in ~1 us: the unfused layers check ~9 tensors a layer)
    _fp32_on_cpu(name, tensor)
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous for the CPU kernels, got strides {tensor.stride()}")
    if tensor.dim() == 0 or tensor.shape[0] != shape[0] or tensor.numel() != math.prod(shape):
        raise ValueError(f"{name} must be {list(shape)} for the CPU kernels, got {list(tensor.shape)}")


def _whole_vectors(name: str, size: int, lanes: int = 16) -> None:
    if size % lanes:
        raise ValueError(f"the CPU kernels take {name} in whole vectors: a multiple of {lanes}, got {size}")


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x += delta`` in place (unless None), then RMSNorm of ``x`` with ``weight`` (a new tensor)."""
    rows, hidden = x.shape
    _operand("x", x, (rows, hidden))
    if delta is not None:
        _operand("delta", delta, (rows, hidden))
    _operand("weight", weight, (hidden,))
    _whole_vectors("hidden", hidden)
    out = torch.empty_like(x)
    load().bs_add_rms_norm(x.data_ptr(), None if delta is None else delta.data_ptr(), weight.data_ptr(),
                           out.data_ptr(), 0, rows, hidden, eps, torch.get_num_threads())
    return out


def takes_argmax(x: torch.Tensor) -> bool:
    """Whether ``argmax_rows`` runs these rows: built here, fp32 on the CPU, each row contiguous."""
    return load() is not None and x.is_cpu and x.dtype == torch.float32 and x.stride(-1) == 1


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row's index of its first largest value (int64 ``[rows]``), as ``x.max(dim=-1).indices``."""
    _fp32_on_cpu("x", x)
    if x.dim() != 2 or x.shape[1] == 0 or x.stride(1) != 1:
        raise ValueError(f"x must be [rows, columns > 0] with contiguous rows, got {list(x.shape)}, {x.stride()}")
    out = torch.empty(x.shape[0], dtype=torch.int64)
    load().bs_argmax_rows(x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), out.data_ptr(), torch.get_num_threads())
    return out


def takes_nucleus(probs: torch.Tensor) -> bool:
    """Whether ``nucleus_thresholds`` runs these rows: built here, fp32 on the CPU, contiguous."""
    return load() is not None and probs.is_cpu and probs.dtype == torch.float32 and probs.is_contiguous()


def nucleus_thresholds(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Each row's least probability its top-p nucleus keeps (fp32 ``[rows]``; ``top_p`` fp64, each in (0, 1)),
    as ``sampler.nucleus_thresholds`` computes it by a sort of the whole row."""
    _fp32_on_cpu("probs", probs)
    rows_given = top_p.shape == (probs.shape[0],) and top_p.dtype == torch.float64
    if probs.dim() != 2 or not probs.is_contiguous() or not rows_given:
        raise ValueError(f"probs must be contiguous [rows, vocab] and top_p fp64 [rows], got {list(probs.shape)}, "
                         f"{list(top_p.shape)} {top_p.dtype}")
    theta, top_p = torch.empty(probs.shape[0]), top_p.contiguous()  # held: the C call reads its memory
    if load().bs_nucleus_thresholds(probs.data_ptr(), probs.shape[0], probs.shape[1], top_p.data_ptr(),
                                    theta.data_ptr(), torch.get_num_threads()) != 0:
        raise MemoryError("the nucleus kernel could not allocate its copy of a row")
    return theta


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of a fused ``[rows, 2 * intermediate]`` projection."""
    rows, inter = gate_up.shape[0], gate_up.shape[1] // 2
    _operand("gate_up", gate_up, (rows, 2 * inter))
    _whole_vectors("intermediate", inter)
    out = torch.empty(rows, inter, dtype=gate_up.dtype)
    load().bs_silu_mul(gate_up.data_ptr(), out.data_ptr(), 0, rows, inter, torch.get_num_threads())
    return out


def rotary(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotary embedding in place on ``qk [rows, heads, dim]`` (a row-strided view with contiguous
    heads), with ``cos`` and signed ``sin`` whose memory is ``[rows, dim]``."""
    rows, heads, dim = qk.shape
    _fp32_on_cpu("qk", qk)
    if qk.stride(2) != 1 or qk.stride(1) != dim:
        raise ValueError(f"qk's heads must be contiguous for the CPU kernels, got strides {qk.stride()}")
    _operand("cos", cos, (rows, dim))
    _operand("sin", sin, (rows, dim))
    _whole_vectors("half the head dim", dim // 2)
    load().bs_rotary(qk.data_ptr(), qk.stride(0), rows, heads, dim, cos.data_ptr(), sin.data_ptr(),
                     torch.get_num_threads())


def takes_linear(weight: torch.Tensor) -> bool:
    """Whether ``linear`` runs this weight: built here, and fp32 or bf16 on the CPU."""
    return load() is not None and weight.dtype in (torch.float32, torch.bfloat16) and weight.device.type == "cpu"


def amx() -> bool:
    """Whether the kernels may use AMX tiles here (the CPU has them, Linux granted the tile state)."""
    return load() is not None and bool(load().bs_amx_available())


def bf16_prefill_attention() -> bool:
    """Whether bf16 prefill chunks' attention multiplies in bf16 here (``attention_pairs.c``: AMX tiles
    or AVX512-BF16 dot products; queries and softmax weights rounded to bf16, as flash-attn's bf16
    path does), rather than in fp32 on the vector paths."""
    return load() is not None and bool(load().bs_prefill_attention_pairs_available())


def bf16_decode_attention(head_dim: int) -> bool:
    """Whether a bf16 cache's rows attended one by one (decodes; every row of a batch-invariant step)
    multiply in bf16 here at this head dim, as the prefill chunks do (``decode_pairs.c``, AVX512-BF16),
    rather than widened to fp32."""
    return load() is not None and bool(load().bs_decode_pairs_takes(head_dim))


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
