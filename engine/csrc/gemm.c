/* Linear layers on the CPU: out[m, n] = x[m, :] . w[n, :] (+ bias[n]), fp32 arithmetic, weights in
 * fp32 or bf16, packed once at load time.
 *
 * Packed layout: panels of PANEL output columns, each [k][PANEL] contiguous, so a thread streams
 * a panel front to back while up to BS_LINEAR_ROWS rows of x are broadcast against it (two vector
 * accumulators a row). The panels are split over the threads; every panel is read once per
 * block of rows (from L2 after the first).
 *
 * Each output element is one fused multiply-add chain over k = 0, 1, .., K-1 starting from 0,
 * then + bias: the same order in the row-block path and the single-row path, so a row's result
 * does not depend on how many rows the call has or where the row sits in it (what
 * EngineConfig.batch_invariant relies on).
 */
#include <omp.h>
#include <stdlib.h>

#include "batchscope.h"
#include "linear_rows.h"
#include "panel_shares.h"
#include "vec.h"

#define PANEL 32
/* Rows one kernel holds (linear_rows.h: BS_LINEAR_ROWS, GCC keeping one accumulator in memory at 15).
 * A decode step's 13-15 rows read each panel once, not in two passes (12 + 1 .. 12 + 3): over
 * SmolLM2-135M's 120 linears and LM head from DRAM (2 threads, fp32, alternating, the same bits)
 * 0.84-0.87x the time at 13-15 rows. More rows go in passes of BS_LINEAR_PASS_ROWS: passes of 15
 * (15 + 1 .. 15 + 4) read 1.04-1.10x the time at 16-19 rows in W1's decode steps at Qwen2.5-0.5B's
 * shape, where one pass of 13-15 rows read 0.92-0.95x. */
/* Depths ahead whose weights are prefetched (4 KB of fp32 panel): the hardware prefetcher alone
 * leaves a decode step's weight stream latency-bound; 1 thread over SmolLM2-135M's weights from
 * DRAM: 1.6x at 13 rows, 1.45x at 24, 1.2x at 64, 1.06x at 256, 1.08x at 1. */
#define PREFETCH 32
/* From 16 rows on a panel takes more than one pass, the later ones from L2 and bound by arithmetic:
 * the last pass prefetches the next panel into L2 (its 32 columns at each depth the pass reads), so
 * that the next panel's first pass does not wait for DRAM (the next panel is most often this
 * thread's own: panels go out in consecutive shares). Only with two passes (16-24 rows), as in
 * gemm_bf16.c, where more passes gained nothing and prefill sizes lost. W1 fp32 step by step
 * (benchmarks.lockstep, 3 rounds): decode-only steps 0.987x the time at 135M, 0.968x at the 0.5B
 * shape; prefill-heavy steps 0.995x and 1.002x. Since then as in gemm_bf16.c (linear_rows.h): one pass
 * of 8 rows or more prefetches the next panel too (its own stream is then a panel ahead), and the
 * passes are balanced (16 rows: 8 + 8, the last pass as long as the first). W1 fp32's decode-only
 * steps at 135M, step by step and split by their rows: 8-12 rows 0.966x the time, 13-15 rows 0.933x,
 * 16 rows 0.959x, 17 rows 0.975x, 18-24 rows 0.975-1.005x; at the 0.5B shape (the single pass alone)
 * 8-12 rows 0.928x, 13-15 rows 0.899x. */

/* A pass's rows take the panel's columns in groups of two vectors: the whole panel with AVX-512, its
 * two halves one after the other on AVX2's 8-float vectors (16 registers hold 6 rows of two
 * accumulators, not of four). Each output's chain is the same either way. */
#define GROUPS (PANEL / (2 * LANES))

/* On AVX2, a pass of at most WHOLE_PANEL_ROWS rows takes the whole panel at once (four vectors a
 * row: 12 accumulators), and linears of at most WHOLE_PANEL_UP_TO rows go in such passes: over
 * SmolLM2-135M's 120 linears and LM head from DRAM (fp32, 2 threads, alternating), 1-3 rows in one
 * pass 0.76-0.83x the time of two half-panel groups, 4-8 rows (passes of 2-3) 0.87-0.97x, 10 rows
 * even, 12 and 16 rows 1.07x and 1.12-1.3x: from there the half panels' 6 rows a pass win. With
 * AVX-512 a group is the whole panel, and WHOLE_PANEL drops these statements (its machine code stays
 * as it was measured). */
#define WHOLE_PANEL_ROWS 3
#define WHOLE_PANEL_UP_TO 8
#if LANES == 8
#define WHOLE_PANEL(...) __VA_ARGS__
#else
#define WHOLE_PANEL(...)
#endif
#if GROUPS == 1  /* (a loop of one trip compiles to other code: GCC unrolls after it inlines) */
#define EACH_GROUP const int g = 0;
#else
/* Unrolled, so that each group's loop over the depth has no test of g: W1 at 135M fp32 on AVX2 step by
 * step (benchmarks.lockstep, 3 rounds) 0.965x the time [0.953-0.975], prefill-heavy 0.958x, decode-only
 * 0.983x. */
#define EACH_GROUP _Pragma("GCC unroll 2") for (int g = 0; g < GROUPS; g++)
#endif

/* Columns col..col + 2 LANES - 1 of the packed weights from element `at`, as two vectors. */
static inline __attribute__((always_inline)) void panel_row(const void *packed, int bf16, int64_t at, vf *lo, vf *hi) {
    if (bf16) {
        const uint16_t *p = (const uint16_t *)packed + at;
        *lo = load_bf16(p), *hi = load_bf16(p + LANES);
    } else {
        const float *p = (const float *)packed + at;
        *lo = load(p), *hi = load(p + LANES);
    }
}

static inline __attribute__((always_inline)) void finish(vf lo, vf hi, const float *bias, int64_t col, float *out) {
    if (bias) lo += load(bias + col), hi += load(bias + col + LANES);
    store(out, lo), store(out + LANES, hi);
}

/* Column group g (two vectors from column 2 g LANES; with `whole`, an AVX2 panel's four vectors) of
 * panel `panel` for `rows` rows. The first group asks for the weights ahead (the whole panel row: a
 * second group finds them in cache) and, with `next`, for the next panel. */
static inline __attribute__((always_inline)) void block_rows(const float *x, int64_t x_stride, const void *packed,
                                                             int bf16, const float *bias, float *out, int64_t n,
                                                             int64_t k, int64_t panel, int rows, int next, int g,
                                                             const int whole) {
    vf lo[BS_LINEAR_ROWS], hi[BS_LINEAR_ROWS];
    WHOLE_PANEL(vf lo2[WHOLE_PANEL_ROWS], hi2[WHOLE_PANEL_ROWS];)
    ACCUMULATORS_IN_REGISTERS(k)
    for (int r = 0; r < rows; r++) lo[r] = hi[r] = (vf){0};
    WHOLE_PANEL(if (whole) for (int r = 0; r < rows; r++) lo2[r] = hi2[r] = (vf){0};)
    const int64_t base = panel * k * PANEL, col = g * 2 * LANES;
    for (int64_t d = 0; d < k; d++) {
        vf w0, w1;
        WHOLE_PANEL(vf w2, w3;)
        if (g == 0) {
            const char *ahead = (const char *)packed + (base + (d + PREFETCH) * PANEL) * (bf16 ? 2 : 4);
            __builtin_prefetch(ahead), __builtin_prefetch(ahead + 64);
        }
        if (next && g == 0) {
            const char *coming = (const char *)packed + (base + k * PANEL + d * PANEL) * (bf16 ? 2 : 4);
            __builtin_prefetch(coming, 0, 2);  /* into L2 (prefetcht1) */
            if (!bf16) __builtin_prefetch(coming + 64, 0, 2);
        }
        panel_row(packed, bf16, base + d * PANEL + col, &w0, &w1);
        WHOLE_PANEL(if (whole) panel_row(packed, bf16, base + d * PANEL + 2 * LANES, &w2, &w3);)
        for (int r = 0; r < rows; r++) {
            float xv = x[r * x_stride + d];
            lo[r] = xv * w0 + lo[r];
            hi[r] = xv * w1 + hi[r];
            WHOLE_PANEL(if (whole) lo2[r] = xv * w2 + lo2[r], hi2[r] = xv * w3 + hi2[r];)
        }
    }
    for (int r = 0; r < rows; r++) finish(lo[r], hi[r], bias, panel * PANEL + col, out + r * n + panel * PANEL + col);
    WHOLE_PANEL(if (whole) for (int r = 0; r < rows; r++)
                    finish(lo2[r], hi2[r], bias, panel * PANEL + 2 * LANES, out + r * n + panel * PANEL + 2 * LANES);)
    (void)whole;
}

/* Every column group of one panel for R rows (nx: prefetch the next panel), the group a constant. */
#define KERNELS(R)                                                                                           \
    static void rows##R##_f32(const float *x, int64_t s, const void *w, const float *b, float *o, int64_t n,    \
                              int64_t k, int64_t p, int nx) {                                                  \
        EACH_GROUP                                                                                            \
            if (nx) block_rows(x, s, w, 0, b, o, n, k, p, R, 1, g, 0); else block_rows(x, s, w, 0, b, o, n, k, p, R, 0, g, 0);  \
    }                                                                                                          \
    static void rows##R##_bf16(const float *x, int64_t s, const void *w, const float *b, float *o, int64_t n,   \
                               int64_t k, int64_t p, int nx) {                                                 \
        EACH_GROUP                                                                                            \
            if (nx) block_rows(x, s, w, 1, b, o, n, k, p, R, 1, g, 0); else block_rows(x, s, w, 1, b, o, n, k, p, R, 0, g, 0);  \
    }
KERNELS(1)
KERNELS(2)
KERNELS(3)
KERNELS(4)
KERNELS(5)
KERNELS(6)
#if BS_LINEAR_ROWS > 6
KERNELS(7)
KERNELS(8)
KERNELS(9)
KERNELS(10)
KERNELS(11)
KERNELS(12)
KERNELS(13)
KERNELS(14)
KERNELS(15)
#endif

typedef void (*Kernel)(const float *, int64_t, const void *, const float *, float *, int64_t, int64_t, int64_t, int);
static const Kernel KERNELS_F32[] = {NULL, rows1_f32, rows2_f32, rows3_f32, rows4_f32, rows5_f32, rows6_f32,
#if BS_LINEAR_ROWS > 6
                                     rows7_f32, rows8_f32, rows9_f32, rows10_f32, rows11_f32, rows12_f32,
                                     rows13_f32, rows14_f32, rows15_f32
#endif
};
static const Kernel KERNELS_BF16[] = {NULL, rows1_bf16, rows2_bf16, rows3_bf16, rows4_bf16, rows5_bf16, rows6_bf16,
#if BS_LINEAR_ROWS > 6
                                      rows7_bf16, rows8_bf16, rows9_bf16, rows10_bf16, rows11_bf16, rows12_bf16,
                                      rows13_bf16, rows14_bf16, rows15_bf16
#endif
};
#if LANES == 8
#define WHOLE_KERNELS(R)                                                                                     \
    static void whole##R##_f32(const float *x, int64_t s, const void *w, const float *b, float *o, int64_t n,   \
                               int64_t k, int64_t p, int nx) {                                                 \
        (void)nx, block_rows(x, s, w, 0, b, o, n, k, p, R, 0, 0, 1);                                           \
    }                                                                                                          \
    static void whole##R##_bf16(const float *x, int64_t s, const void *w, const float *b, float *o, int64_t n,  \
                                int64_t k, int64_t p, int nx) {                                                \
        (void)nx, block_rows(x, s, w, 1, b, o, n, k, p, R, 0, 0, 1);                                           \
    }
WHOLE_KERNELS(1)
WHOLE_KERNELS(2)
WHOLE_KERNELS(3)
static const Kernel WHOLE_F32[] = {NULL, whole1_f32, whole2_f32, whole3_f32};
static const Kernel WHOLE_BF16[] = {NULL, whole1_bf16, whole2_bf16, whole3_bf16};
#endif

/* w [n, k] (fp32, or bf16 as uint16) into packed [n / PANEL][k][PANEL]; n a multiple of PANEL. */
void bs_pack_linear(const void *w, int bf16, int64_t n, int64_t k, void *packed) {
    for (int64_t col = 0; col < n; col++)
        for (int64_t d = 0; d < k; d++) {
            int64_t from = col * k + d, to = (col / PANEL) * k * PANEL + d * PANEL + col % PANEL;
            if (bf16) ((uint16_t *)packed)[to] = ((const uint16_t *)w)[from];
            else ((float *)packed)[to] = ((const float *)w)[from];
        }
}

/* out [m, n] contiguous; x [m, k] with rows x_stride floats apart; bias NULL or [n]. The rows go over
 * each panel in passes (linear_rows.h: row_passes; 7 rows in one pass, not 4 + 2 + 1: 1.3x at 7 rows).
 * A pass's rows each keep their own chain, so a row's result does not depend on its pass.
 * Panels go out in shares that a thread which runs out takes over from the back (panel_shares.h):
 * each thread streams long runs of the weights, and the faster one takes the last panels when the
 * two vCPUs run at different speeds (they do, by up to 20% from moment to moment on a shared host).
 * (Guided runs measured 1.00-1.11x better than static halves in prefill; single panels, or panels
 * split by rows, did worse.) */
void bs_linear(const float *x, int64_t x_stride, const void *packed, int bf16, const float *bias, float *out,
               int64_t m, int64_t n, int64_t k, int num_threads) {
    const Kernel *kernels = bf16 ? KERNELS_BF16 : KERNELS_F32;
    int64_t passes = row_passes(m);
    int prefetching = prefetches_next_panel(m);  /* the next panel, in the last pass */
    WHOLE_PANEL(if (m <= WHOLE_PANEL_UP_TO) kernels = bf16 ? WHOLE_BF16 : WHOLE_F32,
                passes = (m + WHOLE_PANEL_ROWS - 1) / WHOLE_PANEL_ROWS, prefetching = 0;)
    if (k < 1) return no_depth(bias, out, m, n);
    PanelShare shares[BS_MAX_SHARES];
    const int threads = share_panels(shares, num_threads, n / PANEL);
#pragma omp parallel num_threads(threads)
    {
        int64_t first, last, until;
        while (take_run(shares, threads, omp_get_thread_num(), &first, &last, &until))
            for (int64_t p = first; p < last; p++)
                for (int64_t r = 0, passes_left = passes; r < m; passes_left--) {
                    const int rows = pass_rows(m - r, passes_left);
                    const int next = prefetching && passes_left == 1 && p + 1 < until;
                    kernels[rows](x + r * x_stride, x_stride, packed, bias, out + r * n, n, k, p, next);
                    r += rows;
                }
    }
}
