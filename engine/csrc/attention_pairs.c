/* Prefill chunks' attention for bf16 KV caches, in the bf16 pair layout (paged_attention.c calls it for
 * the segments with many rows when the call need not be batch invariant): on AMX tiles where the
 * process may use them, else on AVX512-BF16's dot products (VDPBF16PS), where the CPU has those.
 *
 * Per segment and kv head, the keys and values the chunk needs are first laid out once in the pair
 * layout both instructions read (keys: for every two dims, each key's pair side by side; values: for
 * every two keys, each dim's pair side by side), then every 32-row block of every query head of
 * that kv head runs in two passes:
 *   scores   S = bf16(q * scale) . K^T  (32 rows x 32 keys a time: four 16 x 16 fp32 tiles),
 *   softmax  row by row in fp32 (causal mask, max, exp, sum), the weights rounded to bf16,
 *   values   O = P . V (16 rows x 64 dims a time: four tiles), divided by the row's sum.
 * As flash-attn does in bf16, queries and softmax weights are multiplied in bf16 and every product
 * is accumulated in fp32. Rows past the chunk's end are zeros and never stored.
 *
 * The backends differ only in the two products. A tile product C[16 x 16] += A[16 x 32 bf16] .
 * B[16 pairs][16][2] is, on vectors, one VDPBF16PS per row of A and pair: the row's pair broadcast
 * against B's row of 16 pairs; the vector backend keeps 8 rows x 32 keys (scores) or 4 rows x 64
 * dims (values) of accumulators in registers. On this project's AMD EPYC (AVX512-BF16, no AMX): 3
 * chunks of 170 rows at SmolLM2's heads 0.89 -> 0.69 ms a layer against the fp32 vector path, W1's
 * bf16 prefill-heavy steps 0.98x the time (BENCHMARKS.md, "The sampler, bf16 prefill attention...").
 * The softmax was a fifth of the kernel (perf): it now takes exp only up to the row's last visible
 * vector (zeros after it), on AVX-512's rounding and scaling, and the row's max in one reduction:
 * the kernel alone 0.88-0.91x the time, W1's bf16 prefill-heavy steps 0.985-0.99x.
 */
#include <stdlib.h>
#include <string.h>

#include "batchscope.h"
#include "vec.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#include <omp.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include "amx.h"
#define HAVE_TILES 1
static void start_tiles(void) { configure_tiles((const int[8]){16, 16, 16, 16, 16, 16, 16, 16}); }
static void stop_tiles(void) { _tile_release(); }
#else
#define HAVE_TILES 0
static void start_tiles(void) {}
static void stop_tiles(void) {}
#endif

#define ROWS 32   /* query rows per block: two tile rows */
#define KEYS 32   /* keys per score block, and per value tile (16 pairs) */
#define DEPTH 32  /* bf16 per tile row */

/* One segment's keys and values for one kv head, in pair layout, keys padded with zeros to whole
 * blocks of 32: kt [key blocks][dim / 32][2 key tiles][16 pairs][16 keys][2],
 * vt [key blocks][dim / 16][16 key pairs][16 dims][2]. */
typedef struct {
    uint16_t *kt, *vt;
    int64_t keys;  /* the segment's keys (cached + this chunk) */
    int64_t first_row, rows, pos0;
    const int32_t *table;
    int kv_head;
} Lane;

static const uint16_t *cache_row(const Args *c, const void *cache, const int32_t *table, int64_t j, int kv_head) {
    int64_t slot = (int64_t)table[j / c->block_size] * c->block_size + j % c->block_size;
    return (const uint16_t *)cache + (slot * c->kv_heads + kv_head) * c->dim;
}

/* Keys j and j + 1 (the pair of key j / 2 in block b) into vt: each 16-dim tile's pairs are 16
 * consecutive 32-bit words, key j's dim in the low half (bf16 pairs are little-endian words). */
static void lay_out_values(const Args *c, const Lane *l, int64_t j) {
    const int64_t b = j / KEYS, pair = j % KEYS / 2, tiles = c->dim / 16;
    const uint16_t *v0 = cache_row(c, c->v_cache, l->table, j, l->kv_head);
    const uint16_t *v1 = j + 1 < l->keys ? cache_row(c, c->v_cache, l->table, j + 1, l->kv_head) : NULL;
    for (int64_t t = 0; t < tiles; t++) {
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(v0 + t * 16)));
        __m512i hi = v1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(v1 + t * 16)))
                        : _mm512_setzero_si512();
        _mm512_storeu_si512(l->vt + ((b * tiles + t) * 16 + pair) * 32,
                            _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
}

/* Keys j0 .. j0 + 15 (j0 a multiple of 16; those past the lane's keys as zeros) into kt: per depth
 * block, their 16 pair words each, transposed so that each pair's row holds the 16 keys' words.
 * (Scattered one word at a time, the layout took ~14% of the kernel body's samples at a W1-like step;
 * transposed, the kernel takes 0.95-0.98x the time, the same bits.) */
static void lay_out_keys(const Args *c, const Lane *l, int64_t j0) {
    const int64_t b = j0 / KEYS, half = j0 % KEYS / 16, depth_blocks = c->dim / DEPTH;
    for (int64_t db = 0; db < depth_blocks; db++) {
        vf r[16];  /* each key's 16 pair words, as 32-bit lanes */
        for (int key = 0; key < 16; key++) {
            const uint16_t *row = j0 + key < l->keys ? cache_row(c, c->k_cache, l->table, j0 + key, l->kv_head) : NULL;
            r[key] = row ? (vf)_mm512_loadu_si512(row + db * DEPTH) : (vf){0};
        }
        transpose_lanes(r);
        uint16_t *rows = l->kt + ((b * depth_blocks + db) * 2 + half) * 16 * 32;
        for (int p = 0; p < 16; p++) _mm512_storeu_si512(rows + p * 32, (__m512i)r[p]);
    }
}

/* The lane's keys and values in pair layout (see Lane); the last block's padding zeros. */
static void lay_out(const Args *c, const Lane *l) {
    const int64_t blocks = (l->keys + KEYS - 1) / KEYS, dim = c->dim;
    memset(l->kt + (blocks - 1) * KEYS * dim, 0, sizeof(uint16_t) * KEYS * dim);
    memset(l->vt + (blocks - 1) * KEYS * dim, 0, sizeof(uint16_t) * KEYS * dim);
    for (int64_t j0 = 0; j0 < l->keys; j0 += 16) lay_out_keys(c, l, j0);
    for (int64_t j = 0; j < l->keys; j += 2) lay_out_values(c, l, j);
}

/* Scratch of one thread: a block's queries (bf16), scores (fp32), weights (bf16), a tile's output. */
typedef struct {
    uint16_t *q, *p;
    float *s, *o;
    int64_t width;  /* keys per score row: the longest segment's, in whole blocks */
    int tiles;      /* AMX tiles (else dot products) */
} Scratch;

#if HAVE_TILES
static void scores_on_tiles(const Args *c, const Lane *l, const Scratch *sc, int64_t nkeys) {
    const int depth_blocks = c->dim / DEPTH;
    for (int64_t b = 0; b < nkeys / KEYS; b++) {
        _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
        for (int db = 0; db < depth_blocks; db++) {
            const uint16_t *kt = l->kt + (b * depth_blocks + db) * 2 * 512;
            _tile_loadd(4, sc->q + db * DEPTH, c->dim * 2);
            _tile_loadd(5, sc->q + 16 * c->dim + db * DEPTH, c->dim * 2);
            _tile_loadd(6, kt, 64);
            _tile_loadd(7, kt + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        float *s = sc->s + b * KEYS;
        _tile_stored(0, s, sc->width * 4);
        _tile_stored(1, s + 16, sc->width * 4);
        _tile_stored(2, s + 16 * sc->width, sc->width * 4);
        _tile_stored(3, s + 16 * sc->width + 16, sc->width * 4);
    }
}

#endif

/* The scores of rows 0..rows-1 of the block against every key block, as scores_on_tiles: 8 rows x
 * 32 keys of accumulators, each key half one vector. */
static void scores_on_vectors(const Args *c, const Lane *l, const Scratch *sc, int64_t nkeys, int rows) {
    const int depth_blocks = c->dim / DEPTH;
    for (int64_t b = 0; b < nkeys / KEYS; b++)
        for (int r0 = 0; r0 < rows; r0 += 8) {
            __m512 lo[8], hi[8];
            for (int i = 0; i < 8; i++) lo[i] = hi[i] = _mm512_setzero_ps();
            for (int db = 0; db < depth_blocks; db++) {
                const uint16_t *kt = l->kt + (b * depth_blocks + db) * 2 * 512, *q = sc->q + r0 * c->dim + db * DEPTH;
                for (int p = 0; p < 16; p++) {
                    __m512bh k0 = (__m512bh)_mm512_loadu_si512(kt + p * 32);
                    __m512bh k1 = (__m512bh)_mm512_loadu_si512(kt + 512 + p * 32);
                    for (int i = 0; i < 8; i++) {
                        __m512bh qv = pair_of(q + i * c->dim + 2 * p);
                        lo[i] = _mm512_dpbf16_ps(lo[i], qv, k0), hi[i] = _mm512_dpbf16_ps(hi[i], qv, k1);
                    }
                }
            }
            for (int i = 0; i < 8; i++) {
                float *s = sc->s + (r0 + i) * sc->width + b * KEYS;
                _mm512_storeu_ps(s, lo[i]), _mm512_storeu_ps(s + 16, hi[i]);
            }
        }
}

/* Row i (at position pos) of the scores into bf16 weights exp(s - max) over its visible keys; returns
 * their sum. Keys past pos get weight 0: within the last vector holding a visible key by the mask,
 * past it (the block's later keys and its padding) written as zeros without an exp. */
static float softmax_row(const Scratch *sc, int i, int64_t pos, int64_t nkeys) {
    float *s = sc->s + i * sc->width;
    uint16_t *p = sc->p + i * sc->width;
    const int64_t seen = (pos + LANES) / LANES * LANES;  /* whole vectors up to key pos */
    for (int64_t j = pos + 1; j < seen; j++) s[j] = -3.4e38f;
    vf max = (vf){0} - 3.4e38f, total = {0};
    for (int64_t j = 0; j < seen; j += LANES) max = vmaxf(load(s + j), max);
    const float m = _mm512_reduce_max_ps((__m512)max);
    for (int64_t j = 0; j < seen; j += LANES) {
        vf w = exp_of_weight(load(s + j) - m);
        total += w;
        store_bf16(p + j, w);
    }
    memset(p + seen, 0, sizeof(uint16_t) * (nkeys - seen));
    return hsum(total);
}

#if HAVE_TILES
/* Rows [half * 16, half * 16 + 16) of the block whose first row is `row0`: O = P . V for dims
 * [d0, d0 + 64), each row divided by its sum (times `inv`) into out. */
static void weigh_values_on_tiles(const Args *c, const Lane *l, const Scratch *sc, int64_t nkeys, int half, int d0,
                                  int rows, const float *inv, int64_t row0, int head) {
    const int dim_tiles = c->dim / 16, tiles = c->dim - d0 < 64 ? (c->dim - d0) / 16 : 4;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t b = 0; b < nkeys / KEYS; b++) {
        _tile_loadd(4, sc->p + half * 16 * sc->width + b * KEYS, sc->width * 2);
        const uint16_t *vt = l->vt + (b * dim_tiles + d0 / 16) * 512;
        _tile_loadd(6, vt, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (tiles > 1) {
            _tile_loadd(7, vt + 512, 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (tiles > 2) {
            _tile_loadd(6, vt + 1024, 64);
            _tile_dpbf16ps(2, 4, 6);
        }
        if (tiles > 3) {
            _tile_loadd(7, vt + 1536, 64);
            _tile_dpbf16ps(3, 4, 7);
        }
    }
    _tile_stored(0, sc->o, 256);
    _tile_stored(1, sc->o + 16, 256);
    _tile_stored(2, sc->o + 32, 256);
    _tile_stored(3, sc->o + 48, 256);
    for (int i = 0; i < rows; i++) {
        float *dst = c->out + ((row0 + half * 16 + i) * c->heads + head) * c->dim + d0;
        for (int t = 0; t < tiles; t++) store(dst + t * 16, load(sc->o + i * 64 + t * 16) * inv[half * 16 + i]);
    }
}

#endif

/* weigh_values_on_tiles on vectors, for T of the 4 dim tiles: 4 rows x T x 16 dims of accumulators. */
static inline __attribute__((always_inline)) void weigh_values_on_vectors(
    const Args *c, const Lane *l, const Scratch *sc, int64_t nkeys, int half, int d0, int rows, const float *inv,
    int64_t row0, int head, const int T) {
    const int dim_tiles = c->dim / 16;
    for (int i0 = 0; i0 < rows; i0 += 4) {
        __m512 acc[4][4];
        for (int i = 0; i < 4; i++)
            for (int t = 0; t < T; t++) acc[i][t] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nkeys / KEYS; b++) {
            const uint16_t *vt = l->vt + (b * dim_tiles + d0 / 16) * 512;
            const uint16_t *p = sc->p + (half * 16 + i0) * sc->width + b * KEYS;
            for (int kp = 0; kp < 16; kp++) {
                __m512bh v[4];
                for (int t = 0; t < T; t++) v[t] = (__m512bh)_mm512_loadu_si512(vt + t * 512 + kp * 32);
                for (int i = 0; i < 4; i++) {
                    __m512bh w = pair_of(p + i * sc->width + 2 * kp);
                    for (int t = 0; t < T; t++) acc[i][t] = _mm512_dpbf16_ps(acc[i][t], w, v[t]);
                }
            }
        }
        for (int i = 0; i < 4 && i0 + i < rows; i++) {
            float *dst = c->out + ((row0 + half * 16 + i0 + i) * c->heads + head) * c->dim + d0;
            for (int t = 0; t < T; t++) _mm512_storeu_ps(dst + t * 16, acc[i][t] * inv[half * 16 + i0 + i]);
        }
    }
}

static void weigh_values(const Args *c, const Lane *l, const Scratch *sc, int64_t nkeys, int half, int d0,
                         int rows, const float *inv, int64_t row0, int head) {
#if HAVE_TILES
    if (sc->tiles) return weigh_values_on_tiles(c, l, sc, nkeys, half, d0, rows, inv, row0, head);
#endif
    if (c->dim - d0 >= 64) weigh_values_on_vectors(c, l, sc, nkeys, half, d0, rows, inv, row0, head, 4);
    else weigh_values_on_vectors(c, l, sc, nkeys, half, d0, rows, inv, row0, head, 2);  /* dim % 32 == 0 */
}

static void scores(const Args *c, const Lane *l, const Scratch *sc, int64_t nkeys, int rows) {
#if HAVE_TILES
    if (sc->tiles) return scores_on_tiles(c, l, sc, nkeys);
#endif
    scores_on_vectors(c, l, sc, nkeys, rows);
}

/* One 32-row block (rows r0.. of the lane) of query head `head`. */
static void attend_block(const Args *c, const Lane *l, const Scratch *sc, int head, int64_t r0) {
    const int rows = l->rows - r0 < ROWS ? (int)(l->rows - r0) : ROWS;
    const int64_t last_pos = l->pos0 + r0 + rows - 1, nkeys = (last_pos + KEYS) / KEYS * KEYS;
    for (int i = 0; i < ROWS; i++)
        for (int d = 0; d < c->dim; d += LANES) {
            const float *src = c->q + (l->first_row + r0 + i) * c->q_stride + head * c->dim + d;
            store_bf16(sc->q + i * c->dim + d, i < rows ? load(src) * c->scale : (vf){0});
        }
    scores(c, l, sc, nkeys, rows);
    float inv[ROWS];
    for (int i = 0; i < ROWS; i++) inv[i] = i < rows ? 1.0f / softmax_row(sc, i, l->pos0 + r0 + i, nkeys) : 0.0f;
    for (int i = rows; i < ROWS; i++) memset(sc->p + i * sc->width, 0, sizeof(uint16_t) * nkeys);
    for (int half = 0; half * 16 < rows; half++)
        for (int d0 = 0; d0 < c->dim; d0 += 64)
            weigh_values(c, l, sc, nkeys, half, d0, rows - half * 16 < 16 ? rows - half * 16 : 16, inv,
                         l->first_row + r0, head);
}

int bs_prefill_attention_pairs_available(void) { return 1; }

/* batchscope.h; 0, or -2 out of memory. */
int bs_prefill_attention_pairs(const Args *a, const int32_t *segments, int count, const int32_t *row_start,
                             const int32_t *row_count, const int32_t *num_cached, const int32_t *tables,
                             int64_t table_stride, int max_keys, int num_threads) {
    const Args c = *a;
    const int heads = c.heads, kv_heads = c.kv_heads, dim = c.dim;
    const int64_t width = (max_keys + KEYS - 1) / KEYS * KEYS, lanes = (int64_t)count * kv_heads;
    Lane *lane = calloc(lanes, sizeof(Lane));
    uint16_t *layout = malloc(sizeof(uint16_t) * 2 * width * dim * lanes);
    int64_t items = 0;
    if (!lane || !layout) return free(lane), free(layout), -2;
    for (int64_t i = 0; i < lanes; i++) {
        int s = segments[i / kv_heads];
        lane[i] = (Lane){layout + 2 * width * dim * i, layout + (2 * i + 1) * width * dim, num_cached[s] + row_count[s],
                         row_start[s], row_count[s], num_cached[s], tables + s * table_stride, (int)(i % kv_heads)};
        items += (row_count[s] + ROWS - 1) / ROWS * (heads / kv_heads);
    }
    int failed = 0;
    const int tiles = HAVE_TILES && bs_amx_available();
#pragma omp parallel num_threads(num_threads)
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < lanes; i++) lay_out(&c, &lane[i]);
        Scratch sc = {aligned_alloc(64, sizeof(uint16_t) * ROWS * dim), aligned_alloc(64, sizeof(uint16_t) * ROWS * width),
                      aligned_alloc(64, sizeof(float) * ROWS * width), aligned_alloc(64, sizeof(float) * 16 * 64), width,
                      tiles};
        if (!sc.q || !sc.p || !sc.s || !sc.o) flag_failure(&failed);
        else if (tiles) start_tiles();
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < items; item++) {
            if (has_failed(&failed)) continue;
            int64_t k = item, i = 0;  /* item -> (lane, query head of its group, row block) */
            const int group = heads / kv_heads;
            while (k >= (lane[i].rows + ROWS - 1) / ROWS * group) k -= (lane[i].rows + ROWS - 1) / ROWS * group, i++;
            const int blocks = (int)((lane[i].rows + ROWS - 1) / ROWS);
            attend_block(&c, &lane[i], &sc, lane[i].kv_head * group + (int)(k / blocks), (k % blocks) * ROWS);
        }
        if (tiles && sc.q && sc.p && sc.s && sc.o) stop_tiles();
        free(sc.q), free(sc.p), free(sc.s), free(sc.o);
    }
    free(lane), free(layout);
    return failed ? -2 : 0;
}

#else  /* no bf16 dot products on this CPU: paged_attention.c's vector paths take every row */

int bs_prefill_attention_pairs_available(void) { return 0; }

int bs_prefill_attention_pairs(const Args *a, const int32_t *segments, int count, const int32_t *row_start,
                             const int32_t *row_count, const int32_t *num_cached, const int32_t *tables,
                             int64_t table_stride, int max_keys, int num_threads) {
    (void)a, (void)segments, (void)count, (void)row_start, (void)row_count, (void)num_cached, (void)tables;
    (void)table_stride, (void)max_keys, (void)num_threads;
    return -1;
}

#endif
