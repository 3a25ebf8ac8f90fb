/* bf16 linear layers on AMX tiles (TDPBF16PS), where the CPU has AMX and the kernel lets us use it.
 *
 * One tile instruction multiplies 16 rows x 32 bf16 of x by 32 x 16 bf16 of weights into a 16 x 16
 * fp32 tile: 8192 multiply-adds, 16x what an AVX-512 bf16 dot product does, so prefill-sized calls
 * are limited by how fast tiles are fed, not by arithmetic. As oneDNN's bf16 GEMM does, x is
 * rounded to bf16 (to nearest even) and products are accumulated in fp32.
 *
 * Packed weights: panels of 32 output columns; a panel is, for every block of 32 depths, two 1 KB
 * tiles (columns 0-15, 16-31) in the tile instruction's pair layout: row p of a tile holds, for
 * each of its 16 columns, the weights at depths 2p and 2p + 1 side by side. A panel is contiguous,
 * so a thread streams its panels front to back. Depth is padded with zeros to a multiple of 32.
 *
 * Each output element is one chain of tile multiply-adds over the depth blocks in order, starting
 * from zero, then + bias. A tile instruction computes each element from its own row of x only, and
 * a call's last rows go through tiles configured with fewer rows, never through padding, so a row's
 * result never depends on the other rows of the call (what EngineConfig.batch_invariant relies on).
 */
#include <stdlib.h>
#include <string.h>

#include "batchscope.h"
#include "vec.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include "amx.h"
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PANEL 32
#define DEPTH 32  /* bf16 depths per tile row: 64 bytes */
/* Depth blocks ahead whose weight tiles are prefetched (4 KB): 1 thread over SmolLM2-135M's weights
 * from DRAM, 1.4x at 1 and 13 rows, 1.5x at 24, 1.1x at 256. */
#define PREFETCH 2
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Whether this process may use AMX (Linux asks each process to request the tile state once). */
int bs_amx_available(void) {
    static int state = -1;
    if (state < 0) state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return state;
}

/* Row r of x [m, k] into xb, laid out as the tiles will read it: rows in groups of 16, each group
 * [kp / 32 tiles][16 rows][32 depths] (a tile is 1 KB of contiguous memory), zeros past k. */
static void to_bf16_tiles(const float *x, int64_t r, int64_t k, int64_t kp, uint16_t *xb) {
    uint16_t *group = xb + r / 16 * 16 * kp + r % 16 * DEPTH;
    for (int64_t d = 0; d < kp; d += LANES) {
        uint16_t *dst = group + d / DEPTH * 512 + d % DEPTH;
        if (d + LANES <= k) store_bf16(dst, load(x + d));
        else for (int i = 0; i < LANES; i++) dst[i] = d + i < k ? to_bf16(x[d + i]) : 0;
    }
}

/* Depth padded to whole tile rows. */
int64_t bs_amx_depth(int64_t k) { return (k + DEPTH - 1) / DEPTH * DEPTH; }

/* w [n, k] bf16 into panels (n a multiple of PANEL): packed [n / 32][kp / 32][2 tiles][16 pairs][16][2]. */
void bs_pack_linear_amx(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed) {
    const int64_t kp = bs_amx_depth(k);
    for (int64_t col = 0; col < n; col++)
        for (int64_t d = 0; d < kp; d++) {
            int64_t panel = col / PANEL, half = (col % PANEL) / 16, c = col % 16;
            int64_t to = ((panel * (kp / DEPTH) + d / DEPTH) * 2 + half) * 512 + (d % DEPTH / 2) * 32 + c * 2 + d % 2;
            packed[to] = d < k ? w[col * k + d] : 0;
        }
}

/* Tiles: C in 0-3 (rows a, b x columns lo, hi), x in 4-5, weights in 6-7. */
static void configure(int rows_a, int rows_b) {
    const int rows[8] = {rows_a, rows_a, rows_b, rows_b, rows_a, rows_b, 16, 16};
    configure_tiles(rows);
}

static inline void add_bias(float *out, int64_t n, int rows, const float *bias, int64_t col) {
    if (!bias) return;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < PANEL; c += LANES) store(out + r * n + col + c, load(out + r * n + col + c) + load(bias + col + c));
}

/* Up to 32 rows (`rows_a` <= 16 in tiles 0/1, then `rows_b` in 2/3) of xb times one panel. */
static void panel_rows(const uint16_t *xb, int64_t kp, const uint16_t *panel, float *out, int64_t n, int64_t col,
                       int rows_a, int rows_b, const float *bias, int stream) {
    const int64_t blocks = kp / DEPTH;
    _tile_zero(0);
    _tile_zero(1);
    if (rows_b) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t b = 0; b < blocks; b++) {
        const uint16_t *w = panel + b * 1024;
        if (stream)
            for (int line = 0; line < 32; line++) __builtin_prefetch((const char *)(w + PREFETCH * 1024) + line * 64);
        _tile_loadd(6, w, 64);
        _tile_loadd(7, w + 512, 64);
        for (int line = 0; line < 16; line++) {  /* the next depth block's x tiles, from L2 (5-10% at 256 rows) */
            __builtin_prefetch((const char *)(xb + (b + 1) * 512) + line * 64);
            if (rows_b) __builtin_prefetch((const char *)(xb + 16 * kp + (b + 1) * 512) + line * 64);
        }
        _tile_loadd(4, xb + b * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (rows_b) {
            _tile_loadd(5, xb + 16 * kp + b * 512, 64);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, out + col, n * 4);
    _tile_stored(1, out + col + 16, n * 4);
    if (rows_b) {
        _tile_stored(2, out + 16 * n + col, n * 4);
        _tile_stored(3, out + 16 * n + col + 16, n * 4);
    }
    add_bias(out, n, rows_a + rows_b, bias, col);
}

/* A thread's panels [first, last) for every block of up to 32 rows; full blocks first, then the
 * rest under a tile configuration of its own. */
static void thread_panels(const uint16_t *xb, int64_t kp, const uint16_t *packed, const float *bias, float *out,
                          int64_t m, int64_t n, int64_t first, int64_t last) {
    const int64_t full = m / 32 * 32, rest = m - full;
    if (full) {
        configure(16, 16);
        for (int64_t p = first; p < last; p++)  /* a panel stays in L1/L2 while the rows pass over it */
            for (int64_t r = 0; r < full; r += 32)
                panel_rows(xb + r * kp, kp, packed + p * kp * PANEL, out + r * n, n, p * PANEL, 16, 16, bias, m <= 32);
    }
    if (rest) {
        int a = rest > 16 ? 16 : (int)rest, b = (int)rest - a;
        configure(a, b);
        for (int64_t p = first; p < last; p++)
            panel_rows(xb + full * kp, kp, packed + p * kp * PANEL, out + full * n, n, p * PANEL, a, b, bias, m <= 32);
    }
    _tile_release();
}

/* out [m, n] fp32 contiguous = bf16(x [m, k], rows x_stride apart) . w^T (+ bias); -2 out of memory. */
int bs_linear_amx(const float *x, int64_t x_stride, const uint16_t *packed, const float *bias, float *out,
                  int64_t m, int64_t n, int64_t k, int num_threads) {
    const int64_t kp = bs_amx_depth(k), panels = n / PANEL;
    uint16_t *xb = aligned_alloc(64, sizeof(uint16_t) * ((m + 15) / 16 * 16 * kp + 64));
    if (!xb) return -2;
    if (num_threads > panels) num_threads = (int)panels;
#pragma omp parallel num_threads(num_threads)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++) to_bf16_tiles(x + r * x_stride, r, k, kp, xb);
        int t = omp_get_thread_num(), count = omp_get_num_threads();
        thread_panels(xb, kp, packed, bias, out, m, n, panels * t / count, panels * (t + 1) / count);
    }
    free(xb);
    return 0;
}

#else  /* no AMX here: the caller uses gemm_bf16.c */

int bs_amx_available(void) { return 0; }
int64_t bs_amx_depth(int64_t k) { return k; }
void bs_pack_linear_amx(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed) { (void)w, (void)n, (void)k, (void)packed; }
int bs_linear_amx(const float *x, int64_t x_stride, const uint16_t *packed, const float *bias, float *out,
                  int64_t m, int64_t n, int64_t k, int num_threads) {
    (void)x, (void)x_stride, (void)packed, (void)bias, (void)out, (void)m, (void)n, (void)k, (void)num_threads;
    return -1;
}

#endif
