/* What the linear kernels' row blocks share (gemm.c, gemm_bf16.c).
 *
 * A block keeps one accumulator per row and column vector in arrays indexed by the row, the number of
 * rows a constant in each rowsN copy. GCC (12) turns the loop that zeroes them into a memset of the
 * arrays before it unrolls the loop and moves the arrays into registers, and the memset stays: from 9
 * rows, two calls of up to 960 bytes on the stack per panel and block, 2.7% of W1 bf16's samples at
 * 135M (`perf`, steady state); below 9 rows, the same zeros stored to the stack. Unrolled first, and
 * with the depth known to be at least 1 (so no path reads the arrays without the loop over the depth),
 * they stay in registers: SmolLM2-135M's four linears alone (bf16, weights in cache, 2 threads,
 * alternating with the memset build) 0.961x the time at 256 rows, 0.956x at 13, 0.979x at 16; fp32
 * 0.975x at 256 rows; W1 step by step (benchmarks.lockstep, 3 rounds), all steps 0.976x at 135M bf16
 * (prefill-heavy 0.969x), 0.973x fp32, 0.976x at the 0.5B shape bf16; the same bits. */
#ifndef BATCHSCOPE_LINEAR_ROWS_H
#define BATCHSCOPE_LINEAR_ROWS_H
#include <stdint.h>

#include "batchscope.h"
#include "vec.h"

/* Rows of x one pass over a linear's weight panel holds (gemm.c, gemm_bf16.c): up to BS_LINEAR_ROWS
 * rows in one pass (two accumulator vectors a row and column group: with AVX-512, 30 of the 32
 * vector registers); more rows in passes of at most BS_LINEAR_PASS_ROWS. Each kernel's notes give
 * the measurements behind both. AVX2 has 16 registers: 6 rows (12 accumulators, the two weight
 * vectors and the broadcast row value), as BLIS's 6 x 16 AVX2 kernel. */
#if LANES == 16
#define BS_LINEAR_ROWS 15
#define BS_LINEAR_PASS_ROWS 12
#define NEXT_PANEL_PASSES 2  /* prefetches_next_panel */
#else
#define BS_LINEAR_ROWS 6
#define BS_LINEAR_PASS_ROWS 6
#define NEXT_PANEL_PASSES 3
#endif

/* Put before the loop that zeroes a block's accumulators, `depth` the trip count of the loop after it. */
#define ACCUMULATORS_IN_REGISTERS(depth)      \
    if ((depth) < 1) __builtin_unreachable(); \
    _Pragma("GCC unroll 16")

/* How a linear's m rows go over each weight panel: up to BS_LINEAR_ROWS rows in one pass; more in as
 * few passes of at most BS_LINEAR_PASS_ROWS as they need, of balanced sizes (16 rows: 8 + 8, not
 * 12 + 4; 17 rows: 9 + 8). */
static inline int64_t row_passes(int64_t m) {
    return m <= BS_LINEAR_ROWS ? 1 : (m + BS_LINEAR_PASS_ROWS - 1) / BS_LINEAR_PASS_ROWS;
}

/* The rows of the next pass, `left` rows to go in `passes` passes. */
static inline int pass_rows(int64_t left, int64_t passes) { return (int)((left + passes - 1) / passes); }

/* Whether the last pass over a panel prefetches the next panel into L2 (the kernels' notes): from 8
 * rows (below, the weight stream alone bounds a pass) to NEXT_PANEL_PASSES passes: two with AVX-512
 * (more passes gained nothing, and at prefill sizes the next panel evicts the rows from L2); three on
 * AVX2, whose passes hold 6 rows (13-18 rows): W1's decode-only steps step by step (benchmarks.lockstep,
 * 3 rounds) 0.988x the time at 135M fp32 (8-15 rows 0.953x), 0.985x at the 0.5B shape; prefill-heavy even. */
static inline int prefetches_next_panel(int64_t m) { return m >= 8 && row_passes(m) <= NEXT_PANEL_PASSES; }

/* out [m, n] of a linear without depth (k == 0): its bias, or zeros. The kernels answer it here, so
 * that their row blocks may take the depth to be at least 1. */
static inline void no_depth(const float *bias, float *out, int64_t m, int64_t n) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) out[r * n + c] = bias ? bias[c] : 0.0f;
}

#endif
