/* The arithmetic peak of this CPU's vector units, in FLOP/s: each thread runs independent chains of
 * fused multiply-adds on registers only (no memory traffic), as many chains as hide the latency.
 * What a matmul kernel's GFLOP/s is a fraction of (benchmarks/instruction_peak.py). fp32 on the
 * kernels' own vectors (engine/csrc/vec.h: 16 floats with AVX-512, 8 with AVX2's FMA); bf16 on
 * AVX512-BF16's dot product (two multiply-adds a lane), 0 where the CPU has none. */
#include <omp.h>
#include <stdint.h>

#include "../engine/csrc/vec.h"

#define CHAINS 12

static float fp32_chains(int64_t iters) {
    vf a[CHAINS], b = (vf){0} + 1.0000001f, c = (vf){0} + 1e-7f, sum = {0};
    for (int i = 0; i < CHAINS; i++) a[i] = (vf){0} + (float)i;
    for (int64_t it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = fmadd(a[i], b, c);
    for (int i = 0; i < CHAINS; i++) sum += a[i];
    return sum[0];
}

static float bf16_chains(int64_t iters) {
#if defined(__AVX512BF16__)
    __m512 a[CHAINS];
    __m512bh one = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_dpbf16_ps(a[i], one, one);
    float sum = 0;
    for (int i = 0; i < CHAINS; i++) sum += _mm512_reduce_add_ps(a[i]);
    return sum;
#else
    (void)iters;
    return 0;
#endif
}

/* FLOP/s of `threads` threads, each `iters` rounds of CHAINS vector multiply-adds; 0 for bf16 where
 * the CPU has no AVX512-BF16. `sink` keeps the chains from being optimized away. */
double bs_instruction_peak(int bf16, int64_t iters, int threads, float *sink) {
#if !defined(__AVX512BF16__)
    if (bf16) return 0;
#endif
    double start = omp_get_wtime();
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += bf16 ? bf16_chains(iters) : fp32_chains(iters);
    double seconds = omp_get_wtime() - start;
    *sink = total;
    double per_round = CHAINS * (double)LANES * 2.0 * (bf16 ? 2.0 : 1.0);  /* lanes, multiply + add, pairs */
    return per_round * (double)iters * threads / seconds;
}
