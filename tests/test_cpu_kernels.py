"""The CPU kernels (engine/csrc via engine/cpu_kernels.py): paged attention equals per-request
attention computed in float64 for every kind of segment (decodes, chunks after cached tokens,
whole prompts; GQA groups of 1 to 8 heads, head dims 16 to 128; blocks shuffled in the pool; fp32
and bf16 caches); a row's result is the same bits alone, in any batch and under any chunking; the
fused norm and SiLU equal torch's; and an engine whose kernels cannot be built falls back to the
torch backend."""
import random

import pytest
import torch
import torch.nn.functional as F
from kernels_here import needs_kernels

from engine import cpu_kernels
from engine.attention import StepLayout, make_backend
from engine.models.prepacked import KernelLinear

BLOCK, HEADS, KV_HEADS, DIM = 16, 9, 3, 64
pytestmark = needs_kernels


def layout_of(segments: list[tuple[int, int]], tables: list[list[int]]) -> StepLayout:
    """segments: (query rows, cached tokens) per request, in row order."""
    cu = [0]
    for rows, _ in segments:
        cu.append(cu[-1] + rows)
    width = max(len(t) for t in tables)
    table = torch.tensor([t + [t[0]] * (width - len(t)) for t in tables])
    positions = torch.cat([torch.arange(c, c + n) for n, c in segments])
    owner = torch.repeat_interleave(torch.arange(len(segments)), torch.tensor([n for n, _ in segments]))
    slots = table[owner, positions // BLOCK] * BLOCK + positions % BLOCK
    return StepLayout(cu, [c for _, c in segments], [n + c for n, c in segments], table, slots)


def random_step(segments, dtype, seed=0, heads=HEADS, kv_heads=KV_HEADS, dim=DIM):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    need = [-(-(n + c) // BLOCK) for n, c in segments]
    pool = list(range(sum(need) + 3))
    rng.shuffle(pool)  # a request's blocks need not be in order in the pool
    tables, at = [], 0
    for blocks in need:
        tables.append(pool[at:at + blocks])
        at += blocks
    k_cache = torch.randn(len(pool), BLOCK, kv_heads, dim, generator=gen).to(dtype)
    v_cache = torch.randn(len(pool), BLOCK, kv_heads, dim, generator=gen).to(dtype)
    rows = sum(n for n, _ in segments)
    q = torch.randn(rows, heads, dim, generator=gen)
    k = torch.randn(rows, kv_heads, dim, generator=gen)
    v = torch.randn(rows, kv_heads, dim, generator=gen)
    return layout_of(segments, tables), tables, q, k, v, k_cache, v_cache


def reference(layout, tables, q, k_cache, v_cache, scale, bf16_products=False):
    """Each request's queries against its own keys (causal), in float64. With ``bf16_products``, as
    attention_pairs.c multiplies: the queries (times the scale) and the softmax weights exp(s - max)
    rounded to bf16, each row divided by the sum of its unrounded weights."""
    out = torch.empty(q.shape, dtype=torch.float64)
    group = q.shape[1] // k_cache.shape[2]
    for i, table in enumerate(tables):
        start, end, n = layout.cu_seqlens_q[i], layout.cu_seqlens_q[i + 1], layout.seq_lens_k[i]
        keys = k_cache[table].flatten(0, 1)[:n].double().repeat_interleave(group, dim=1)
        values = v_cache[table].flatten(0, 1)[:n].double().repeat_interleave(group, dim=1)
        queries = (q[start:end] * scale).bfloat16() if bf16_products else q[start:end] * scale
        scores = torch.einsum("qhd,khd->hqk", queries.double(), keys)
        causal = torch.arange(n)[None, :] <= torch.arange(layout.num_cached[i], n)[:, None]
        scores = scores.masked_fill(~causal, float("-inf"))
        weights = (scores - scores.amax(dim=-1, keepdim=True)).exp()
        used = weights.float().bfloat16().double() if bf16_products else weights
        out[start:end] = torch.einsum("hqk,khd->qhd", used, values) / weights.sum(dim=-1).transpose(0, 1)[..., None]
    return out


def attend(layout, q, k, v, k_cache, v_cache, batch_invariant=False):
    backend = make_backend("cpu", BLOCK)
    plan = backend.plan(layout, torch.device("cpu"), batch_invariant)  # (the step's setting)
    return backend.forward(plan, q, k, v, k_cache, v_cache, q.shape[2]**-0.5)


# Chunk pieces of 16 rows and of 4, 5, 9 and 14 (the fp32 path weighs 6 + 6 + 4 rows at head dim 64).
MIXED = [(1, 40), (1, 300), (17, 0), (5, 60), (1, 0), (33, 16), (1, 449), (100, 0), (20, 301), (9, 70), (14, 0)]


# (query heads, kv heads, head dim): SmolLM2's; Qwen2.5-0.5B's (7 query heads a kv head, weighed 4 + 3);
# Qwen2.5-1.5B's (dim 128: 6 a kv head, 2 at a time); dims of 2 and 1 vectors, with and without GQA.
SHAPES = [(9, 3, 64), (14, 2, 64), (12, 2, 128), (4, 4, 32), (8, 1, 16)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("batch_invariant", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_kind_of_segment_matches_per_request_attention(dtype, batch_invariant, shape):
    check_segments(dtype, batch_invariant, shape)


def check_segments(dtype, batch_invariant, shape):
    heads, kv_heads, dim = shape
    layout, tables, q, k, v, k_cache, v_cache = random_step(MIXED, dtype, heads=heads, kv_heads=kv_heads, dim=dim)
    out = attend(layout, q, k, v, k_cache, v_cache, batch_invariant)  # writes this step's K/V first
    assert out.dtype == torch.float32
    expected = reference(layout, tables, q, k_cache, v_cache, dim**-0.5)
    for i, (rows, _) in enumerate(MIXED):
        part = slice(layout.cu_seqlens_q[i], layout.cu_seqlens_q[i + 1])
        assert (out[part].double() - expected[part]).abs().max() < tolerance(dtype, rows, batch_invariant, dim)
    slots = layout.slot_mapping
    assert torch.equal(k_cache.view(-1, kv_heads, dim)[slots], k.to(dtype))


def tolerance(dtype: torch.dtype, rows: int, batch_invariant: bool, dim: int) -> float:
    """fp32 arithmetic throughout: 2e-6; on bf16 products (bf16 caches: chunks of 16 rows or more on AMX
    tiles or AVX512-BF16 dot products; rows attended one by one, decodes and every row of a
    batch-invariant step, on AVX512-BF16 at head dims 32-128), the queries and softmax weights are
    multiplied in bf16 (as flash-attn's bf16 path does)."""
    chunk = rows >= 16 and not batch_invariant and cpu_kernels.bf16_prefill_attention()
    one_by_one = (rows == 1 or batch_invariant) and cpu_kernels.bf16_decode_attention(dim)
    return 1e-2 if dtype == torch.bfloat16 and (chunk or one_by_one) else 2e-6


@pytest.mark.skipif(cpu_kernels.load() is None or not cpu_kernels.bf16_prefill_attention(),
                    reason="this CPU has neither AMX nor AVX512-BF16: bf16 chunks attend in fp32")
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[2] % 32 == 0], ids=lambda s: "x".join(map(str, s)))
def test_bf16_chunks_multiply_queries_and_weights_in_bf16(shape):
    """Chunks of 16 rows or more on a bf16 cache take attention_pairs.c (AMX tiles or AVX512-BF16
    dot products): on average within 1e-6 of the same products rounded in float64 (seen: 2e-8 to
    1e-7), where the fp32 paths differ from them by ~4e-4. (A weight whose rounding to bf16 flips
    on the scores' fp32 rounding moves a few outputs by up to ~1e-3: the bound on the largest
    difference is the 1e-2 of test_every_kind_of_segment_matches_per_request_attention.)"""
    heads, kv_heads, dim = shape
    segments = [(17, 0), (33, 16), (100, 0), (20, 301), (1, 40)]
    layout, tables, q, k, v, k_cache, v_cache = random_step(segments, torch.bfloat16, heads=heads,
                                                            kv_heads=kv_heads, dim=dim)
    out = attend(layout, q, k, v, k_cache, v_cache).double()
    expected = reference(layout, tables, q, k_cache, v_cache, dim**-0.5, bf16_products=True)
    in_fp32 = reference(layout, tables, q, k_cache, v_cache, dim**-0.5)
    chunks = slice(0, layout.cu_seqlens_q[4])
    assert (out[chunks] - expected[chunks]).abs().mean() < 1e-6
    assert (out[chunks] - expected[chunks]).abs().max() < 1e-2
    assert (in_fp32[chunks] - expected[chunks]).abs().mean() > 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_chunks_rows_give_no_weight_at_all_to_its_later_keys(dtype):
    """Causal means exactly nothing from later keys, not a tiny weight: a 64-row chunk whose rows
    from 24 on carry values of 1e30 leaves the first 24 rows' outputs ordinary (a weight of
    e^-50 on a masked key would add ~2e8; rows 16-23 see keys 24-31 in the vector of their own)."""
    layout, tables, q, k, v, k_cache, v_cache = random_step([(64, 0)], dtype)
    v[24:] = 1e30
    out = attend(layout, q, k, v, k_cache, v_cache)
    assert out[:24].abs().max() < 10
    assert out[24:].abs().min() > 1e20  # (each of those rows weighs at least its own key)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a_bf16_cache_attends_row_by_row_on_bf16_products(shape):
    """Row by row (decodes; every row when batch invariant), a bf16 cache multiplies the queries and
    the softmax weights in bf16 as the prefill chunks do (decode_pairs.c, on AVX512-BF16 at head dims
    32-128): on average within 1e-6 of those products in float64 (seen: 1e-8 to 3e-7), where fp32
    arithmetic differs from them by ~2e-4. Elsewhere its keys and values are widened exactly to fp32
    and take the fp32 path: the same bits as the fp32 cache holding the same values."""
    heads, kv_heads, dim = shape
    layout, tables, q, k, v, k_cache, v_cache = random_step(MIXED, torch.bfloat16, heads=heads, kv_heads=kv_heads,
                                                            dim=dim)
    k, v = k.bfloat16().float(), v.bfloat16().float()  # as the bf16 cache stores this step's K/V
    in_bf16 = attend(layout, q, k, v, k_cache, v_cache, batch_invariant=True)
    if not cpu_kernels.bf16_decode_attention(dim):
        in_fp32 = attend(layout, q, k, v, k_cache.float(), v_cache.float(), batch_invariant=True)
        assert torch.equal(in_bf16, in_fp32)
        return
    expected = reference(layout, tables, q, k_cache, v_cache, dim**-0.5, bf16_products=True)
    in_fp32 = reference(layout, tables, q, k_cache, v_cache, dim**-0.5)
    assert (in_bf16.double() - expected).abs().mean() < 1e-6
    assert (in_fp32 - expected).abs().mean() > 1e-5


def test_batch_invariant_rows_do_not_depend_on_their_batch_or_their_chunking():
    """The same request, prefilled whole among others and alone in two chunks: the same bits."""
    layout, tables, q, k, v, k_cache, v_cache = random_step([(3, 10), (40, 0), (1, 77)], torch.float32)
    batched = attend(layout, q, k, v, k_cache, v_cache, batch_invariant=True)
    own = slice(3, 43)  # the 40-row prompt's rows
    for first in (7, 33):  # chunked: rows 0..first-1, then the rest, each step alone
        for rows, cached in ((first, 0), (40 - first, first)):
            step = layout_of([(rows, cached)], [tables[1]])
            part = slice(own.start + cached, own.start + cached + rows)
            alone = attend(step, q[part], k[part], v[part], k_cache, v_cache, batch_invariant=True)
            assert torch.equal(alone, batched[part])


def test_fused_norm_and_silu_equal_torch():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(37, 576, generator=gen)
    delta, weight = torch.randn(37, 576, generator=gen), torch.randn(576, generator=gen)
    expected_sum = x + delta
    expected = weight * F.rms_norm(expected_sum, (576,), eps=1e-5)
    out = cpu_kernels.add_rms_norm(x, delta, weight, 1e-5)
    assert torch.allclose(x, expected_sum, atol=0, rtol=0)  # the sum is written into x
    assert torch.allclose(out, expected, atol=1e-5, rtol=1e-5)
    gate_up = torch.randn(37, 2 * 1536, generator=gen) * 8
    gate, up = gate_up.split(1536, dim=-1)
    assert torch.allclose(cpu_kernels.silu_mul(gate_up), F.silu(gate) * up, atol=1e-5, rtol=1e-5)


def test_an_engine_without_the_kernels_uses_the_torch_backend(tiny_model_dir, monkeypatch):
    from engine import LLM, SamplingParams

    monkeypatch.setattr("engine.attention.cpu_backend.cpu_kernels.load", lambda: None)
    llm = LLM(tiny_model_dir, device="cpu", num_kv_blocks=32)
    assert llm.engine.runner.plan.attention == "torch" and llm.engine.runner.backend.name == "torch"
    assert llm.config.attention_backend == "cpu"  # what was asked stays (frozen); the plan says what runs
    assert llm.generate(["hello"], SamplingParams(max_tokens=3, temperature=0))[0].token_ids


@pytest.fixture(params=cpu_kernels.BF16_KERNELS)
def bf16_kernel(request, monkeypatch):
    """Each bf16 linear kernel that runs on this CPU, chosen as BATCHSCOPE_BF16_KERNEL chooses it."""
    monkeypatch.setenv("BATCHSCOPE_BF16_KERNEL", request.param)
    cpu_kernels.bf16_kernel.cache_clear()
    try:
        cpu_kernels.bf16_kernel()
    except ValueError as exc:
        pytest.skip(str(exc))
    yield request.param
    cpu_kernels.bf16_kernel.cache_clear()


def test_an_unknown_bf16_kernel_is_refused(monkeypatch):
    monkeypatch.setenv("BATCHSCOPE_BF16_KERNEL", "tiles")
    cpu_kernels.bf16_kernel.cache_clear()
    with pytest.raises(ValueError, match="BATCHSCOPE_BF16_KERNEL='tiles' does not run here"):
        cpu_kernels.bf16_kernel()
    cpu_kernels.bf16_kernel.cache_clear()


@pytest.mark.skipif(cpu_kernels.load() is None or not cpu_kernels.load().bs_linear_bf16_pairs_available(),
                    reason="no AVX512-BF16 here: the bf16 pairs kernel (and its bf16 inputs) do not run")
@pytest.mark.parametrize("bf16_kernel", ["pairs"], indirect=True)
def test_norm_and_silu_in_bf16_feed_the_pairs_kernel_the_same_bits_as_its_own_rounding(bf16_kernel):
    """A fused layer on the pairs kernel has its norms and SiLU write bf16 (decoder_layer.c): each is
    its fp32 result rounded as torch rounds, and the linear on those rows is the same bits as on the
    fp32 rows it would round itself; an odd depth is refused. The layer is packed for the pairs
    kernel even where AMX runs bf16 layers by default."""
    library, threads = cpu_kernels.load(), torch.get_num_threads()
    gen = torch.Generator().manual_seed(3)
    x, weight = torch.randn(37, 576, generator=gen), torch.randn(576, generator=gen)
    normed, rounded = torch.empty(37, 576), torch.empty(37, 576, dtype=torch.bfloat16)
    library.bs_add_rms_norm(x.data_ptr(), None, weight.data_ptr(), normed.data_ptr(), 0, 37, 576, 1e-5, threads)
    library.bs_add_rms_norm(x.data_ptr(), None, weight.data_ptr(), rounded.data_ptr(), 1, 37, 576, 1e-5, threads)
    assert torch.equal(rounded, normed.to(torch.bfloat16))
    gate_up = torch.randn(37, 2 * 1536, generator=gen) * 8
    act, act_rounded = torch.empty(37, 1536), torch.empty(37, 1536, dtype=torch.bfloat16)
    library.bs_silu_mul(gate_up.data_ptr(), act.data_ptr(), 0, 37, 1536, threads)
    library.bs_silu_mul(gate_up.data_ptr(), act_rounded.data_ptr(), 1, 37, 1536, threads)
    assert torch.equal(act_rounded, act.to(torch.bfloat16))
    layer = KernelLinear(torch.randn(96, 576, generator=gen).bfloat16(), torch.randn(96, generator=gen))
    out = torch.empty(37, layer.packed.shape[0])
    status = library.bs_linear_bf16_rows(rounded.data_ptr(), layer.packed.data_ptr(), layer.bias.data_ptr(),
                                         out.data_ptr(), 37, out.shape[1], 576, threads)
    assert status == 0 and torch.equal(out[:, :96], layer(normed))
    assert library.bs_linear_bf16_rows(rounded.data_ptr(), layer.packed.data_ptr(), None, out.data_ptr(), 37,
                                       out.shape[1], 575, threads) == -1


def test_fp32_linear_equals_f_linear_and_a_rows_result_does_not_depend_on_the_batch():
    check_linear(torch.float32, rounds_x=False)


@pytest.fixture(scope="module")
def avx2_build(tmp_path_factory):
    """This tree built for AVX2 with FMA (x86-64-v3: 8-float vectors, vec.h), where this CPU runs it: on
    an AVX2 host that is the build in use; on an AVX-512 host its own paths are checked here too."""
    flags = cpu_kernels._cpu_flags().split()
    if not (b"avx2" in flags and b"fma" in flags):
        pytest.skip("this CPU cannot run an AVX2 build")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_kernels, "FLAGS", tuple(f.replace("native", "x86-64-v3") for f in cpu_kernels.FLAGS))
        patch.setenv("BATCHSCOPE_CACHE", str(tmp_path_factory.mktemp("avx2")))
        library = cpu_kernels.this_tree(cpu_kernels.compiler())
    assert cpu_kernels.vector_bits(library) == (256, 256)
    return library


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_avx2_build_attends_and_multiplies_as_the_references_do(avx2_build, dtype):
    """Its attention on every kind of segment and shape (8 rows a chunk's work item, head dims split
    into 32-dim parts), and its linear (6 rows a pass, a panel's columns in two halves)."""
    with cpu_kernels.using(avx2_build):
        for shape in SHAPES:
            for batch_invariant in (False, True):
                check_segments(dtype, batch_invariant, shape)
        if dtype == torch.float32:
            check_linear(torch.float32, rounds_x=False)


def test_bf16_linear_equals_f_linear_and_a_rows_result_does_not_depend_on_the_batch(bf16_kernel):
    check_linear(torch.bfloat16, rounds_x=bf16_kernel != "widen")


def test_the_bf16_kernels_round_x_as_torch_does_bit_for_bit(bf16_kernel):
    """x through an identity weight comes back as its bf16 rounding: ties to even both ways, the
    carries into the exponent, every lane of a vector and a tail (37 columns, odd: a padded pair)."""
    if bf16_kernel == "widen":
        pytest.skip("the widening kernel multiplies x in fp32")
    gen = torch.Generator().manual_seed(5)
    bits = torch.randint(0x00800000, 0x7f000000, (40, 37), generator=gen, dtype=torch.int64)
    low = torch.tensor([0x8000, 0x7fff, 0x8001, 0x0000, 0xffff, 0x18000])  # ties, neighbours, carries
    bits[:, :6] = (bits[:, :6] & ~0xffff) + low
    bits[::2] |= 1 << 31  # negative rows
    x = bits.to(torch.int32).view(torch.float32)
    layer = KernelLinear(torch.eye(37, dtype=torch.bfloat16), None)
    assert torch.equal(layer(x), x.to(torch.bfloat16).float())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_linear_without_depth_gives_its_bias(dtype, bf16_kernel):
    """in_features 0: no product at all, so every row is the bias (or zeros without one); the row
    blocks themselves take the depth to be at least 1 (linear_rows.h)."""
    bias = torch.arange(40, dtype=torch.float32)
    assert torch.equal(KernelLinear(torch.empty(40, 0, dtype=dtype), bias)(torch.empty(3, 0)), bias.expand(3, 40))
    assert torch.equal(KernelLinear(torch.empty(40, 0, dtype=dtype), None)(torch.empty(3, 0)), torch.zeros(3, 40))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_panel_is_computed_once_whatever_the_threads(dtype, bf16_kernel):
    """The threads start on shares of the panels and take over each other's last ones
    (panel_shares.h): with more threads than cores (so some run late and others steal), more than
    panels, or one, every output column is computed, and the same bits as on one thread."""
    gen = torch.Generator().manual_seed(7)
    previous = torch.get_num_threads()
    for panels in (1, 3, 7, 40):
        layer = KernelLinear(torch.randn(32 * panels, 48, generator=gen).to(dtype), torch.randn(32 * panels))
        x = torch.randn(20, 48, generator=gen)
        try:
            torch.set_num_threads(1)
            alone = layer(x)
            for threads in (2, 3, 5, 8):
                torch.set_num_threads(threads)
                for _ in range(5):
                    assert torch.equal(layer(x), alone), (panels, threads)
        finally:
            torch.set_num_threads(previous)


def check_linear(dtype: torch.dtype, rounds_x: bool):
    gen = torch.Generator().manual_seed(2)
    weight, bias = torch.randn(90, 70, generator=gen).to(dtype), torch.randn(90, generator=gen)
    x = torch.randn(37, 70, generator=gen)
    layer = KernelLinear(weight, bias)  # 90 outputs: the last 32-column panel padded
    out = layer(x)
    rounded = x.to(dtype).float() if rounds_x else x
    assert torch.allclose(out, F.linear(rounded, weight.float(), bias), atol=1e-4, rtol=1e-5)
    for rows in (1, 2, 5, 12, 13, 14, 15, 16, 17, 25, 30, 31, 33):  # every row block of the kernels, and tails
        for start in (0, 3):
            part = slice(start, start + rows)
            assert torch.equal(layer(x[part]), out[part])


@pytest.mark.parametrize("columns", [1, 5, 16, 17, 33, 49152])
def test_argmax_rows_picks_what_torch_max_picks(columns):
    """Ties (the first), NaN (the first NaN), all -inf, every lane position and a tail, rows apart."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(8, columns, generator=gen)
    x[1] = 0.5
    x[2, columns // 3:] = x[2].max() + 1
    x[3, -1] = float("nan")
    x[4, columns // 2] = x[4, -1] = float("nan")
    x[5] = float("-inf")
    x[6, ::2] = 7.0
    x[7, columns // 2:] = float("inf")
    assert torch.equal(cpu_kernels.argmax_rows(x), x.max(dim=-1).indices)
    if columns > 1:  # rows further apart than their length
        assert torch.equal(cpu_kernels.argmax_rows(x[:, 1:]), x[:, 1:].max(dim=-1).indices)


def test_argmax_rows_refuses_what_it_cannot_read():
    with pytest.raises(TypeError, match="float32"):
        cpu_kernels.argmax_rows(torch.zeros(2, 3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="contiguous rows"):
        cpu_kernels.argmax_rows(torch.zeros(3, 2).t())
    with pytest.raises(ValueError, match="columns > 0"):
        cpu_kernels.argmax_rows(torch.zeros(2, 0))


def nucleus_rows(vocab: int) -> torch.Tensor:
    """Probability rows of every shape the nucleus meets: peaked and flat, ties (a row of rounded
    logits), tokens of probability 0 (a top-k cut), and a row whose sum (0.5) is short of top-p."""
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(7, vocab, generator=gen) * torch.tensor([[12.0], [4.0], [1.0], [0.1], [3.0], [6.0], [2.0]])
    logits[4] = logits[4].round()
    logits[5, vocab // 2:] = float("-inf")
    probs = logits.softmax(dim=-1)
    probs[6] *= 0.5
    return probs


@pytest.mark.parametrize("vocab", [4, 1000, 49152])
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.95, 0.999])
def test_nucleus_thresholds_are_the_sorting_references(vocab, top_p):
    """The same threshold as the sampler's sort of the whole row, row for row."""
    from engine.sampler import nucleus_thresholds
    probs = nucleus_rows(vocab)
    top_ps = torch.full((probs.shape[0],), top_p, dtype=torch.float64)
    ours = cpu_kernels.nucleus_thresholds(probs, top_ps)
    assert torch.equal(ours, nucleus_thresholds(probs, top_ps))
    assert torch.equal(cpu_kernels.nucleus_thresholds(probs[3:4].contiguous(), top_ps[3:4]), ours[3:4])
    strided = torch.full((2 * probs.shape[0],), top_p, dtype=torch.float64)[::2]
    assert torch.equal(cpu_kernels.nucleus_thresholds(probs, strided), ours)


def test_nucleus_thresholds_refuse_what_they_cannot_read():
    top_p = torch.full((3,), 0.9, dtype=torch.float64)
    with pytest.raises(TypeError, match="float32"):
        cpu_kernels.nucleus_thresholds(torch.zeros(3, 4, dtype=torch.bfloat16), top_p)
    with pytest.raises(ValueError, match="contiguous"):
        cpu_kernels.nucleus_thresholds(torch.zeros(4, 3).t(), top_p)
    with pytest.raises(ValueError, match="fp64"):
        cpu_kernels.nucleus_thresholds(torch.zeros(3, 4), top_p.float())


def test_rotary_in_place_is_the_same_bits_as_torchs():
    from engine.models.llama import rotate, signed_sin

    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(21, 15 * 64, generator=gen)  # 12 q/k heads and 3 v heads of one fused projection
    angles = torch.randn(21, 64, generator=gen)
    cos, sin = angles.cos(), signed_sin(angles.sin())
    qk = qkv[:, :12 * 64].view(21, 12, 64)
    expected = rotate(qk, cos[:, None, :], sin[:, None, :])
    values = qkv[:, 12 * 64:].clone()
    cpu_kernels.rotary(qk, cos, sin)
    assert torch.equal(qk, expected) and torch.equal(qkv[:, 12 * 64:], values)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_decoder_layers_give_the_same_bits_as_the_modules(dtype):
    """The default model (head_dim 64: every layer fused) with chunked prefills beside decodes: each
    generated token's log-probabilities, one C call a layer vs the modules one by one. Steps of 128
    rows take the element-wise kernels' threaded paths (the residual add's included)."""
    from engine import LLM, SamplingParams

    # (no prefix caching: the second run must compute what the first did, not reuse its blocks)
    llm = LLM("default", dtype=dtype, max_num_batched_tokens=128, num_kv_blocks=64, enable_prefix_caching=False)
    model = llm.engine.loaded.model
    assert model.fused_layers is not None
    prompts = [list(range(100, 100 + n)) for n in (5, 70, 33, 1, 200)]
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True, logprobs=3)
    fused = llm.generate(prompts, params)
    model.fused_layers = None
    modules = llm.generate(prompts, params)
    assert [o.token_ids for o in fused] == [o.token_ids for o in modules]
    assert [o.logprobs for o in fused] == [o.logprobs for o in modules]  # one dict per token: id -> logprob


def test_a_segments_rows_are_the_same_bits_alone_as_among_others():
    """The threads take the work in an order of its cost (prefill pieces first, the costliest
    first; then decode rows): whatever comes before or after it, a segment's rows are its own."""
    layout, tables, q, k, v, k_cache, v_cache = random_step(MIXED, torch.float32)
    batched = attend(layout, q, k, v, k_cache, v_cache)
    for i, (rows, cached) in enumerate(MIXED):
        part = slice(layout.cu_seqlens_q[i], layout.cu_seqlens_q[i + 1])
        alone = attend(layout_of([(rows, cached)], [tables[i]]), q[part], k[part], v[part], k_cache, v_cache)
        assert torch.equal(alone, batched[part]), f"segment {i} ({rows} rows after {cached})"


def test_using_swaps_the_library_the_kernels_run_on_for_a_block():
    built, other = cpu_kernels.load(), object()
    with cpu_kernels.using(other):
        assert cpu_kernels.load() is other
    assert cpu_kernels.load() is built


def rows_of(*shape, dtype=torch.float32, device="cpu"):
    return torch.zeros(*shape, dtype=dtype, device=device)


WRAPPER_CASES = [
    (lambda: cpu_kernels.add_rms_norm(rows_of(4, 64, dtype=torch.float64), None, rows_of(64), 1e-5), TypeError,
     "x must be float32"),
    (lambda: cpu_kernels.add_rms_norm(rows_of(64, 4).t(), None, rows_of(64), 1e-5), ValueError, "x must be contiguous"),
    (lambda: cpu_kernels.add_rms_norm(rows_of(4, 64), rows_of(4, 64, device="meta"), rows_of(64), 1e-5), ValueError,
     "delta must be on the CPU"),
    (lambda: cpu_kernels.add_rms_norm(rows_of(4, 64), rows_of(3, 64), rows_of(64), 1e-5), ValueError,
     r"delta must be \[4, 64\]"),
    (lambda: cpu_kernels.add_rms_norm(rows_of(4, 60), None, rows_of(60), 1e-5), ValueError, "a multiple of 16"),
    (lambda: cpu_kernels.silu_mul(rows_of(4, 64, dtype=torch.bfloat16)), TypeError, "gate_up must be float32"),
    (lambda: cpu_kernels.silu_mul(rows_of(4, 128)[:, :64]), ValueError, "gate_up must be contiguous"),
    (lambda: cpu_kernels.rotary(rows_of(4, 2, 64, dtype=torch.float64), rows_of(4, 64), rows_of(4, 64)), TypeError,
     "qk must be float32"),
    (lambda: cpu_kernels.rotary(rows_of(4, 64, 2).transpose(1, 2), rows_of(4, 64), rows_of(4, 64)), ValueError,
     "qk's heads must be contiguous"),
    (lambda: cpu_kernels.rotary(rows_of(4, 2, 64), rows_of(64, 4).t(), rows_of(4, 64)), ValueError,
     "cos must be contiguous"),
    (lambda: cpu_kernels.rotary(rows_of(4, 2, 64), rows_of(4, 64), rows_of(3, 64)), ValueError,
     r"sin must be \[4, 64\]"),
]


@pytest.mark.parametrize("call, error, said", WRAPPER_CASES, ids=[f"case{i}" for i in range(len(WRAPPER_CASES))])
def test_the_wrappers_refuse_tensors_the_kernels_cannot_read(call, error, said):
    """A wrong dtype, device, layout or size is an error here, not a read of the wrong memory in C."""
    with pytest.raises(error, match=said):
        call()


def test_more_query_heads_than_the_kernel_holds_are_refused_when_the_backend_is_chosen():
    backend = make_backend("cpu", BLOCK)
    assert backend.unsupported(cpu_kernels.MAX_HEADS, 8, 64, torch.float32) is None
    why = backend.unsupported(cpu_kernels.MAX_HEADS + 8, 8, 64, torch.float32)
    assert why == "136 query heads, more than the kernel's 128"


def test_a_model_with_more_heads_than_the_kernel_holds_runs_on_torchs_attention(tmp_path, caplog):
    """Refused at load with the reason logged, not failing every step."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    from engine import LLM, SamplingParams

    config = LlamaConfig(vocab_size=128, hidden_size=272, intermediate_size=128, num_hidden_layers=1, head_dim=16,
                         num_attention_heads=136, num_key_value_heads=17, tie_word_embeddings=True)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    llm = LLM(str(tmp_path), device="cpu", num_kv_blocks=16)
    assert llm.engine.runner.backend.name == "torch" and llm.engine.loaded.model.fused_layers is None
    assert (llm.engine.runner.plan.attention, llm.engine.runner.plan.fused_layers) == ("torch", False)
    assert "136 query heads, more than the kernel's 128): using 'torch'" in caplog.text
    assert llm.generate([[1, 2, 3]], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))[0].token_ids
