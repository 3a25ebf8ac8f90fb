"""CPU tensors on 2 MiB pages (transparent huge pages), for the data every step streams: the packed
weights and the KV cache.

Why: a step reads every weight (424 MB for SmolLM2-135M in fp32) and each request's KV blocks.
On 4 KiB pages that is a TLB miss every 4 KiB, and in a virtual machine each miss walks two page
tables (the guest's and the host's). On 2 MiB pages the walks all but vanish. Measured on this
project's KVM guest, 2 threads, SmolLM2-135M fp32: its 120 packed linears alone 1.08-1.10x at 12
rows, 1.04-1.07x at 256; a whole W1 run, step by step against 4 KiB pages in one process, decode
steps 1.02x (prefill-heavy steps within the noise). The same bits either way.

Linux backs a region with huge pages only when asked (``transparent_hugepage/enabled`` is usually
``madvise``): the tensor is a private anonymous mapping (``mmap.mmap``'s default, shared memory,
is left alone by THP here) advised ``MADV_HUGEPAGE`` before it is touched. Elsewhere, below 2 MiB,
or where the advice is refused, the tensor is an ordinary ``torch.zeros``.

The memory is committed when the tensor is made (written once, as ``torch.zeros`` and vLLM's KV
cache are), not left to fault in on first use. A fresh mapping reads as zeros without it, but then
each KV block's first write, inside a step, faults its pages in: 60 huge pages a block's range for
SmolLM2's 30 layers of K and V, each cleared by the kernel (and on this project's VM also faulted
in by the host). Measured here, 16 decode rows of SmolLM2-135M bf16: steps of 17-20 ms took 34-63 ms
whenever the free queue handed out a block in untouched pages, and a 0.5 GiB pool took 1.3-2 s of
such faults in all, spread over the first workloads (the free queue cycles through the whole pool).
Committing costs the same at start (here ~1.3 s a 0.5 GiB pool, ~20 ms once resident), and a pool
the machine cannot hold fails there, not in the middle of a request.
"""
from __future__ import annotations

import ctypes
import math
import mmap

import torch

HUGE_PAGE = 2 << 20
MIN_BYTES = HUGE_PAGE  # smaller tensors stay on torch's allocator


def _advised_mapping(nbytes: int) -> tuple[mmap.mmap, int] | None:
    """A private anonymous mapping of at least ``nbytes`` from a 2 MiB boundary, advised
    ``MADV_HUGEPAGE``, and the offset of that boundary in it; None where that cannot be had."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or not hasattr(mmap, "MAP_PRIVATE"):
        return None
    try:
        mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        mapping.madvise(advice)
    except (OSError, ValueError):
        return None
    start = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    return mapping, -start % HUGE_PAGE


def zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zero-filled CPU tensor, resident, on huge pages where it is at least 2 MiB and Linux allows them.
    The tensor keeps its mapping alive; the mapping is unmapped with the last tensor viewing it."""
    numel = math.prod(shape)
    nbytes = numel * dtype.itemsize
    found = _advised_mapping(nbytes) if nbytes >= MIN_BYTES else None
    if found is None:
        return torch.zeros(shape, dtype=dtype)
    mapping, offset = found
    return torch.frombuffer(mapping, dtype=dtype, count=numel, offset=offset).view(shape).zero_()  # committed


def huge_page_bytes() -> int:
    """This process's memory on transparent huge pages (``AnonHugePages``), 0 where unknown."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def release_free_memory() -> bool:
    """Hand the heap memory freed so far back to the system (glibc's ``malloc_trim``); False
    where there is no glibc.

    Why: glibc keeps freed memory in per-thread arenas, and every engine runs its own thread.
    An engine that loads (weights read, copied, packed) and later shuts down leaves hundreds of
    MB held in its threads' arenas, so a server whose Compare runs load and drop engines grows
    with every run. Measured here, 4 load/shutdown cycles of the default model: 824 MB held
    after, 365 MB with this call after each."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.malloc_trim(0)) or True
