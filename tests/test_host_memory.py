"""Host tensors on huge pages (engine/host_memory.py): zero-filled, writable, kept alive by the
tensor, on 2 MiB pages where Linux grants them, resident from the start (no page faulted in later,
inside a step); small tensors and refusals fall back to torch; an engine's packed weights and KV
cache live there."""
import ctypes
import gc
import mmap
from pathlib import Path

import pytest
import torch
from kernels_here import needs_kernels

from engine import cpu_kernels, host_memory

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str | None:
    """The bracketed transparent-huge-page mode ('always', 'madvise', 'never'), None if unknown."""
    try:
        text = THP.read_text()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")]


needs_thp = pytest.mark.skipif(thp_mode() not in ("always", "madvise"),
                               reason=f"transparent huge pages are {thp_mode()!r} here")


def resident_fraction(t: torch.Tensor) -> float:
    """The share of the tensor's pages in memory, from mincore(2)."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    start = t.data_ptr() // page * page
    end = t.data_ptr() + t.numel() * t.element_size()
    pages = -(-(end - start) // page)
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(end - start), vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec) / pages


def test_a_large_tensor_is_resident_before_anything_is_written_to_it():
    """The memory is committed when the tensor is made: a KV block's first write inside a step
    would otherwise fault its pages in there (2 MiB cleared per page, on a VM also the host's
    faults), step after step until the whole pool has been used once."""
    t = host_memory.zeros((16, 1 << 20), torch.float32)  # 64 MiB
    assert resident_fraction(t) == 1.0


def test_a_large_tensor_is_zero_filled_writable_and_outlives_its_maker():
    t = host_memory.zeros((3, 1024, 1024), torch.float32)  # 12 MiB
    assert t.shape == (3, 1024, 1024) and t.dtype == torch.float32 and t.is_contiguous()
    assert not t.any()
    t.fill_(2.5)
    gc.collect()  # nothing but the tensor holds the mapping
    assert float(t.sum()) == 2.5 * t.numel()
    assert t.data_ptr() % host_memory.HUGE_PAGE == 0


def test_bf16_and_odd_shapes_keep_their_dtype_and_size():
    t = host_memory.zeros((4099, 301), torch.bfloat16)
    assert t.shape == (4099, 301) and t.dtype == torch.bfloat16 and not t.any()


def test_a_small_tensor_or_a_refused_mapping_falls_back_to_torch(monkeypatch):
    small = host_memory.zeros((16, 16), torch.float32)
    assert small.shape == (16, 16) and not small.any()
    monkeypatch.setattr(host_memory, "_advised_mapping", lambda nbytes: None)
    big = host_memory.zeros((1024, 1024), torch.float32)
    assert big.shape == (1024, 1024) and not big.any()


@needs_thp
def test_a_touched_tensor_lies_on_huge_pages():
    before = host_memory.huge_page_bytes()
    t = host_memory.zeros((16, 1 << 20), torch.float32)  # 64 MiB
    t.fill_(1.0)  # pages are granted on first touch
    assert host_memory.huge_page_bytes() - before >= 32 << 20


@needs_thp
@needs_kernels
def test_packed_weights_lie_on_huge_pages_and_give_the_same_result():
    weight = torch.randn(3072, 576, generator=torch.Generator().manual_seed(0))
    before = host_memory.huge_page_bytes()
    packed = cpu_kernels.pack_linear(weight)  # 7 MiB
    assert host_memory.huge_page_bytes() - before >= 4 << 20
    x = torch.randn(5, 576, generator=torch.Generator().manual_seed(1))
    got = cpu_kernels.linear(x, packed, None, 3072)
    assert torch.allclose(got, torch.nn.functional.linear(x, weight), atol=1e-4, rtol=1e-4)


def test_an_engines_kv_cache_is_mapped_from_huge_page_boundaries(tiny_model_dir):
    from engine import LLM, SamplingParams

    llm = LLM(tiny_model_dir, device="cpu", num_kv_blocks=2048)
    runner = llm.engine.runner
    for cache in (runner.k_cache, runner.v_cache):
        assert cache.numel() * cache.element_size() >= host_memory.MIN_BYTES
        assert cache.data_ptr() % host_memory.HUGE_PAGE == 0 and resident_fraction(cache) == 1.0
        assert not cache.any()
    assert llm.generate(["hello"], SamplingParams(max_tokens=3, temperature=0))[0].token_ids
