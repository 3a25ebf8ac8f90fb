/* bf16 linear layers with the CPU's bf16 dot-product instruction (AVX512-BF16 vdpbf16ps: two
 * bf16 products per fp32 lane, twice the multiply-adds of an fp32 FMA), where the CPU has it.
 *
 * As oneDNN's bf16 GEMM does, x is rounded to bf16 (to nearest even) and the products are
 * accumulated in fp32. Packed layout: panels of 32 output columns, each [k / 2][32][2]: for every
 * pair of depths, each column's two weights side by side (k padded to even with a zero). One
 * accumulation chain per output, over the depth pairs in order, whatever the number of rows: a
 * row's result never depends on the rest of the call (as in gemm.c).
 */
#include <stdlib.h>

#include "batchscope.h"
#include "linear_rows.h"
#include "panel_shares.h"
#include "vec.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#include <omp.h>

#define PANEL 32
/* Depth pairs ahead whose weights are prefetched (4 KB of panel, as gemm.c). With balanced row blocks
 * (below), W1 at Qwen2.5-0.5B's shape in bf16, step by step against neither (benchmarks.lockstep,
 * 3 rounds): decode-only steps 0.95x the time (0.94-0.96), prefill-heavy 0.99x. */
#define PREFETCH 32

/* Rows one pass over a panel holds (linear_rows.h: BS_LINEAR_ROWS; with the panel's two vectors all 32
 * registers, GCC keeping one accumulator in memory at 15 rows). A decode step's 13-15 rows stream
 * each panel once, not in two passes (7 + 6 .. 8 + 7). Over SmolLM2-135M's 120 linears and LM head
 * from DRAM (2 threads, C alone, alternating, the same bits): 13 and 14 rows 0.84-0.89x the time, 15
 * rows 0.87-0.92x; at Qwen2.5-0.5B's shape 0.84-0.93x. Rows that take more than one pass still go in
 * passes of at most BS_LINEAR_PASS_ROWS: passes of up to 15 gained nothing there (W1's prefill-heavy
 * steps 1.002-1.006x the time in three benchmarks.lockstep runs, within its noise), and their
 * compute-bound passes would carry the accumulator kept in memory. */

/* More than BS_LINEAR_ROWS rows take a second pass over each panel, from L2 and compute-bound, while
 * the first pass is bound by the weight stream: the last pass over a panel therefore prefetches the
 * next panel into L2 (128 bytes a depth pair, as far ahead as the pass goes), so that its arithmetic
 * overlaps the stream the next panel's first pass would wait for. Over the 0.5B shape's linears and
 * LM head (weights from DRAM, 2 threads; C alone, 16 alternating pairs): 15 rows 0.92x and 0.94x the
 * time in two runs, 16 rows 0.76x, 20 rows 0.88x and 1.03x, 24 rows 0.97x and 1.03x: the gain is at
 * the short second passes. W1 bf16 step by step (benchmarks.lockstep, 3 rounds):
 * decode-only steps 0.939x the time at the 0.5B shape, 0.954x at 1.5B, 0.953x at 135M; prefill-heavy
 * steps 0.997-1.009x (measured when 13-15 rows took two passes too). Not with three passes or more:
 * at 25-48 rows the kernel alone read 0.995-1.039x the time (a panel's first pass a smaller part of
 * it), and at prefill sizes the rows' bf16 copy fills L2 and the next panel evicts
 * it (prefill-heavy steps 1.013x). One pass of 8 rows or more prefetches the next panel too (its own
 * stream is then two panels deep): W1's decode-only steps 0.989x and 0.992x the time at 135M, 0.982x
 * at the 0.5B shape (3 rounds each); from 2 rows 1.004x, from 10 rows 0.996x: below 8 rows the stream
 * alone bounds a pass (linear_rows.h: prefetches_next_panel). */

int bs_linear_bf16_pairs_available(void) { return 1; }

void bs_pack_linear_pairs(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed) {
    const int64_t pairs = (k + 1) / 2;
    for (int64_t col = 0; col < n; col++)
        for (int64_t d = 0; d < 2 * pairs; d++) {
            int64_t to = (col / PANEL) * pairs * PANEL * 2 + (d / 2) * PANEL * 2 + (col % PANEL) * 2 + d % 2;
            packed[to] = d < k ? w[col * k + d] : 0;
        }
}

static inline __attribute__((always_inline)) void block_rows(const uint32_t *xb, int64_t pairs, const uint16_t *panel,
                                                             const float *bias, int64_t col, float *out, int64_t n,
                                                             int rows, const uint16_t *next) {
    __m512 lo[BS_LINEAR_ROWS], hi[BS_LINEAR_ROWS];
    ACCUMULATORS_IN_REGISTERS(pairs)
    for (int r = 0; r < rows; r++) lo[r] = hi[r] = _mm512_setzero_ps();
    for (int64_t d = 0; d < pairs; d++) {
        const char *ahead = (const char *)(panel + (d + PREFETCH) * PANEL * 2);
        __builtin_prefetch(ahead), __builtin_prefetch(ahead + 64);
        if (next) {
            const char *coming = (const char *)(next + d * PANEL * 2);
            __builtin_prefetch(coming, 0, 2), __builtin_prefetch(coming + 64, 0, 2);  /* into L2 */
        }
        __m512bh w0 = (__m512bh)_mm512_loadu_si512(panel + d * PANEL * 2);
        __m512bh w1 = (__m512bh)_mm512_loadu_si512(panel + d * PANEL * 2 + PANEL);
        for (int r = 0; r < rows; r++) {
            __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xb[r * pairs + d]);
            lo[r] = _mm512_dpbf16_ps(lo[r], xv, w0);
            hi[r] = _mm512_dpbf16_ps(hi[r], xv, w1);
        }
    }
    for (int r = 0; r < rows; r++) {
        __m512 a = lo[r], b = hi[r];
        if (bias) a = _mm512_add_ps(a, _mm512_loadu_ps(bias + col)), b = _mm512_add_ps(b, _mm512_loadu_ps(bias + col + 16));
        _mm512_storeu_ps(out + r * n + col, a), _mm512_storeu_ps(out + r * n + col + 16, b);
    }
}

#define ROWS(R)                                                                                               \
    static void rows##R(const uint32_t *xb, int64_t pairs, const uint16_t *panel, const float *bias, int64_t col, \
                        float *out, int64_t n, const uint16_t *next) {                                         \
        if (next) /* two copies inlined: the usual one has no prefetch test in its loop */                    \
            block_rows(xb, pairs, panel, bias, col, out, n, R, next);                                          \
        else                                                                                                   \
            block_rows(xb, pairs, panel, bias, col, out, n, R, NULL);                                          \
    }
ROWS(1)
ROWS(2)
ROWS(3)
ROWS(4)
ROWS(5)
ROWS(6)
ROWS(7)
ROWS(8)
ROWS(9)
ROWS(10)
ROWS(11)
ROWS(12)
ROWS(13)
ROWS(14)
ROWS(15)
typedef void (*Kernel)(const uint32_t *, int64_t, const uint16_t *, const float *, int64_t, float *, int64_t,
                       const uint16_t *);
static const Kernel KERNELS[] = {NULL, rows1, rows2, rows3, rows4, rows5, rows6, rows7, rows8, rows9, rows10,
                                 rows11, rows12, rows13, rows14, rows15};

/* A row of k floats as bf16 pairs (k padded to even with a zero): its bf16 values in order, 16 at a time
 * (scalar, this copy took 6% of a 512-row prefill at SmolLM2-135M's shape). */
static void to_bf16_pairs(const float *x, int64_t k, uint16_t *row) {
    int64_t d = 0;
    for (; d + LANES <= k; d += LANES) store_bf16_exact(row + d, load(x + d));
    for (; d < k; d++) row[d] = to_bf16(x[d]);
    if (k % 2) row[k] = 0;
}

/* How a linear's rows go over its panels (linear_rows.h: row_passes) and which threads take them. */
typedef struct {
    int64_t pairs, passes, m, n;
    int prefetching;  /* the next panel, in the last pass */
    int threads;
    PanelShare shares[BS_MAX_SHARES];
} Plan;

static void plan_linear(Plan *p, int64_t m, int64_t n, int64_t k, int num_threads) {
    p->pairs = (k + 1) / 2, p->m = m, p->n = n;
    p->passes = row_passes(m);
    p->prefetching = prefetches_next_panel(m);
    p->threads = share_panels(p->shares, num_threads, n / PANEL);
}

/* This thread's part of out = xb . w^T (+ bias): panels from shares the threads take over from each
 * other (panel_shares.h). In a parallel region of p->threads threads. */
static void stream_panels(Plan *p, const uint32_t *xb, const uint16_t *packed, const float *bias, float *out) {
    const int64_t pairs = p->pairs, m = p->m, n = p->n;
    const int t = omp_get_thread_num();
    int64_t first, last, until;
    while (take_run(p->shares, p->threads, t, &first, &last, &until))
        for (int64_t c = first; c < last; c++) {
            const uint16_t *panel = packed + c * pairs * PANEL * 2;
            const int ahead = p->prefetching && c + 1 < until;
            for (int64_t r = 0, passes_left = p->passes; r < m; passes_left--) {
                const int rows = pass_rows(m - r, passes_left);
                const uint16_t *next = ahead && passes_left == 1 ? panel + pairs * PANEL * 2 : NULL;
                KERNELS[rows](xb + r * pairs, pairs, panel, bias, c * PANEL, out + r * n, n, next);
                r += rows;
            }
        }
}

/* out [m, n] fp32 contiguous = bf16(x [m, k], rows x_stride apart) . w^T (+ bias); -2 out of memory. */
int bs_linear_bf16_pairs(const float *x, int64_t x_stride, const uint16_t *packed, const float *bias, float *out,
                         int64_t m, int64_t n, int64_t k, int num_threads) {
    if (k < 1) return no_depth(bias, out, m, n), 0;
    Plan p;
    plan_linear(&p, m, n, k, num_threads);
    uint32_t *xb = malloc(sizeof(uint32_t) * (m * p.pairs + 1));
    if (!xb) return -2;
#pragma omp parallel num_threads(p.threads)
    {
#pragma omp for schedule(static)  /* x to bf16 pairs, rows shared by the threads */
        for (int64_t r = 0; r < m; r++) to_bf16_pairs(x + r * x_stride, k, (uint16_t *)(xb + r * p.pairs));
        stream_panels(&p, xb, packed, bias, out);
    }
    free(xb);
    return 0;
}

/* The same on rows already in bf16 (xb [m, k] contiguous, k even: elementwise.c's bf16 outputs), the
 * same bits as bs_linear_bf16_pairs on their fp32 values. */
int bs_linear_bf16_rows(const uint16_t *xb, const uint16_t *packed, const float *bias, float *out, int64_t m,
                        int64_t n, int64_t k, int num_threads) {
    if (k % 2) return -1;
    if (k < 1) return no_depth(bias, out, m, n), 0;
    Plan p;
    plan_linear(&p, m, n, k, num_threads);
#pragma omp parallel num_threads(p.threads)
    stream_panels(&p, (const uint32_t *)xb, packed, bias, out);
    return 0;
}

#else  /* no bf16 dot products on this CPU: the caller uses gemm.c's widening kernel */

int bs_linear_bf16_pairs_available(void) { return 0; }

void bs_pack_linear_pairs(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed) {
    (void)w, (void)n, (void)k, (void)packed;
}

int bs_linear_bf16_pairs(const float *x, int64_t x_stride, const uint16_t *packed, const float *bias, float *out,
                         int64_t m, int64_t n, int64_t k, int num_threads) {
    (void)x, (void)x_stride, (void)packed, (void)bias, (void)out, (void)m, (void)n, (void)k, (void)num_threads;
    return -1;
}

int bs_linear_bf16_rows(const uint16_t *xb, const uint16_t *packed, const float *bias, float *out, int64_t m,
                        int64_t n, int64_t k, int num_threads) {
    (void)xb, (void)packed, (void)bias, (void)out, (void)m, (void)n, (void)k, (void)num_threads;
    return -1;
}

#endif
