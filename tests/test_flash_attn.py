"""The flash_attn backend equals the torch reference.

Each test runs twice: with the real kernels (needs CUDA and the flash_attn package, else it
skips), and on CPU with ``fake_flash_attn``, plain-PyTorch functions with flash-attn's semantics,
so that CI runs the backend's own plumbing (plans, paged and gather modes, int32 tables) too.
"""
import sys

import fake_flash_attn
import pytest
import torch

from engine.attention import StepLayout, make_backend
from engine.config import flash_attn_available


@pytest.fixture(params=["cuda", "cpu-fake"])
def env(request, monkeypatch):
    """(device, dtype); for "cpu-fake" the backend module is imported against the fake and
    dropped afterwards, so no later import sees it bound to the fake."""
    if request.param == "cuda":
        if not flash_attn_available():
            pytest.skip("flash_attn backend needs a CUDA GPU and the flash_attn package")
        yield torch.device("cuda"), torch.bfloat16
        return
    backend_module = "engine.attention.flash_backend"
    real = sys.modules.pop(backend_module, None)
    monkeypatch.setitem(sys.modules, "flash_attn", fake_flash_attn)
    yield torch.device("cpu"), torch.float32
    sys.modules.pop(backend_module, None)
    if real is not None:
        sys.modules[backend_module] = real


@pytest.mark.parametrize("block_size", [16, 256])
def test_flash_matches_torch_on_a_mixed_step(block_size, env):
    torch.manual_seed(0)
    device, dtype = env
    heads, kv_heads, dim = 8, 2, 64
    # Segments: two decodes with long contexts, one chunk with context, one fresh prefill.
    num_cached, q_lens = [500, 200, 300, 0], [1, 1, 64, 100]
    tables, next_block = [], 0
    for cached, q in zip(num_cached, q_lens):
        n = -(-(cached + q) // block_size)
        tables.append(list(range(next_block, next_block + n)))
        next_block += n
    blocks = next_block + 2  # and two blocks nobody uses
    cu = [0]
    for q in q_lens:
        cu.append(cu[-1] + q)
    positions = torch.cat([torch.arange(c, c + q) for c, q in zip(num_cached, q_lens)])
    seg = torch.repeat_interleave(torch.arange(4), torch.tensor(q_lens))
    width = max(len(t) for t in tables)
    table_t = torch.tensor([t + [t[0]] * (width - len(t)) for t in tables])
    slots = (table_t[seg, positions // block_size] * block_size + positions % block_size).to(device)
    layout = StepLayout(cu, num_cached, [c + q for c, q in zip(num_cached, q_lens)], table_t.to(device), slots)
    rows = cu[-1]
    q = torch.randn(rows, heads, dim, device=device, dtype=dtype)
    k = torch.randn(rows, kv_heads, dim, device=device, dtype=dtype)
    v = torch.randn(rows, kv_heads, dim, device=device, dtype=dtype)
    outs = []
    for name in ("torch", "flash_attn"):
        torch.manual_seed(1)
        k_cache = torch.randn(blocks, block_size, kv_heads, dim, device=device, dtype=dtype)
        v_cache = torch.randn(blocks, block_size, kv_heads, dim, device=device, dtype=dtype)
        backend = make_backend(name, block_size)
        plan = backend.plan(layout, device)
        outs.append(backend.forward(plan, q, k, v, k_cache, v_cache, dim**-0.5).float())
    torch.testing.assert_close(outs[1], outs[0], atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("block_size", [16, 256])
def test_flash_decode_plan_matches_torch(block_size, env):
    """The graph-capturable decode path (flash_attn_with_kvcache) equals the torch reference."""
    torch.manual_seed(0)
    device, dtype = env
    heads, kv_heads, dim, width = 8, 2, 64, 4
    seq_lens = torch.tensor([1, 37, 300, 4 * block_size], device=device).clamp(max=width * block_size)
    blocks = 4 * width
    table = torch.randperm(blocks, device=device)[: 4 * width].view(4, width)
    positions = seq_lens - 1
    slots = table[torch.arange(4, device=device), positions // block_size] * block_size + positions % block_size
    q = torch.randn(4, heads, dim, device=device, dtype=dtype)
    k = torch.randn(4, kv_heads, dim, device=device, dtype=dtype)
    v = torch.randn(4, kv_heads, dim, device=device, dtype=dtype)
    outs = []
    for name in ("torch", "flash_attn"):
        torch.manual_seed(1)
        k_cache = torch.randn(blocks, block_size, kv_heads, dim, device=device, dtype=dtype)
        v_cache = torch.randn(blocks, block_size, kv_heads, dim, device=device, dtype=dtype)
        backend = make_backend(name, block_size)
        plan = backend.plan_decode(slots, table, seq_lens)
        outs.append(backend.forward(plan, q, k, v, k_cache, v_cache, dim**-0.5).float())
    torch.testing.assert_close(outs[1], outs[0], atol=2e-2, rtol=2e-2)
