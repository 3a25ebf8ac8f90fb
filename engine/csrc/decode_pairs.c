/* Decode rows of a bf16 KV cache on AVX512-BF16 dot products (VDPBF16PS), as attention_pairs.c
 * multiplies prefill chunks: the query (times the scale) and the softmax weights rounded to bf16,
 * every product accumulated in fp32, each head's output divided by the sum of its unrounded weights.
 *
 * Why: a decode row reads its keys and values once, so the pair layout attention_pairs.c builds for
 * a chunk would cost as much as the row. Here the products read the cache as it lies:
 *   scores  a key's dims are already pairs (2d, 2d + 1): one VDPBF16PS per 32 dims against the
 *           query's pairs, 16 keys' chains interleaved and reduced together (vec.h reduce_lanes);
 *   values  two keys' rows interleaved word by word (VPUNPCKLWD / VPUNPCKHWD) pair each dim's two
 *           values, weighed by the two keys' weights as one pair: one VDPBF16PS per 16 dims and two
 *           keys, for up to 6 query heads of a kv head at once. The interleave permutes the dims
 *           within each 128-bit lane; the output puts them back in place (unpermute).
 * The fp32 row path widened every key and value and took 16 FMAs a (head, key): with its data in
 * cache ~22-28 cycles a (head, key) (BENCHMARKS.md, "Decode attention's arithmetic"). 15-16 decode
 * rows of ~225 keys over 30 layers' caches (2 threads, data from DRAM): 0.79-0.82x the time at
 * SmolLM2's and Qwen2.5-0.5B's heads, 0.78x at 1.5B's; W1's decode-only steps in bf16
 * (benchmarks.lockstep, 3 rounds, three runs and two) 0.978-0.988x at 135M, 0.976-0.977x at the 0.5B
 * shape. From DRAM the kernel is now bound by its stream: a fifth of its samples wait on prefetch
 * instructions. (An earlier trial of the same arithmetic read 0.915x from DRAM and 0.999x in W1; see
 * prefetch_keys (paged_rows.h) and load_pairs for two ways GCC 12 can lose what this kernel gains.)
 *
 * Scratch: the row's bf16 queries (heads x dim) and its scores, heads rows `stride` floats apart;
 * each head's bf16 weights are written over the start of its own scores row (16 at a time, left to
 * right, below the floats still to be read).
 */
#include <string.h>

#include "batchscope.h"
#include "paged_rows.h"
#include "vec.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>

/* Query heads of a kv head weighed at once (2 * dim / 32 accumulators each, in registers): 6 at dims of
 * 32 and 64, 2 at 128. */
#define HEADS_AT_ONCE_64 6
#define HEADS_AT_ONCE_128 2
/* 32 bf16 at p as 16 pairs (a memcpy: GCC 12 casting a loaded __m512i to __m512bh inside an expression
 * stored it to the stack and loaded it back, every time). */
static inline __m512bh load_pairs(const uint16_t *p) {
    __m512bh v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Scores of query head `q` (C vectors of bf16 pairs) for the 16 keys at off[k] + head. */
static inline __attribute__((always_inline)) vf score16(const __m512bh *q, const uint16_t *k_cache,
                                                        const int64_t *off, int64_t head, const int C) {
    vf d[LANES];
    for (int k = 0; k < LANES; k++) {
        __m512 s = _mm512_setzero_ps();
        for (int c = 0; c < C; c++)
            s = _mm512_dpbf16_ps(s, q[c], load_pairs(k_cache + off[k] + head + c * 32));
        d[k] = (vf)s;
    }
    return reduce_lanes(d);
}

/* Pass 1: scores[h * stride + j] for every key (keys past nkeys in the last group: garbage, pass 2
 * masks them). Keys are read where they lie; beyond nkeys a group repeats key 0. */
static inline __attribute__((always_inline)) void score_keys(const Args *a, const int32_t *table, int64_t nkeys,
                                                             const uint16_t *q, float *scores, int64_t stride,
                                                             const int C) {
    const int group = a->heads / a->kv_heads;
    const int early = values_early(a, nkeys, 1);
    int64_t off[LANES];
    for (int64_t j = 0; j < KEYS_AHEAD * LANES; j += LANES)
        for (int h = 0; h < a->heads; h++) prefetch_keys(a, a->k_cache, 1, table, j, h, nkeys);
    for (int64_t j = 0; j < nkeys; j += LANES) {
        for (int k = 0; k < LANES; k++) off[k] = key_offset(a, table, j + k < nkeys ? j + k : 0);
        for (int g = 0; g < a->kv_heads; g++) {
            const int64_t head = (int64_t)g * a->dim;
            for (int h = g * group; h < (g + 1) * group; h++) {
                prefetch_keys(a, a->k_cache, 1, table, j + KEYS_AHEAD * LANES, h, nkeys);
                if (early) prefetch_keys(a, a->v_cache, 1, table, j, h, nkeys);
                __m512bh qv[4];  /* C of them (fixed sizes: a variable-length array lives in memory) */
                for (int c = 0; c < C; c++) qv[c] = load_pairs(q + (int64_t)h * a->dim + c * 32);
                store(scores + h * stride + j, score16(qv, a->k_cache, off, head, C));
            }
        }
    }
}

/* Pass 2 for one head: its weights exp(s - max) as bf16 over the start of its scores row (zeros up to
 * the last group's end); returns 1 / their sum. */
static float softmax_head(float *s, int64_t nkeys) {
    const int64_t end = (nkeys + LANES - 1) / LANES * LANES;
    for (int64_t j = nkeys; j < end; j++) s[j] = -3.4e38f;
    vf max = (vf){0} - 3.4e38f, total = {0};
    for (int64_t j = 0; j < end; j += LANES) max = vmaxf(load(s + j), max);
    const float m = _mm512_reduce_max_ps((__m512)max);
    for (int64_t j = 0; j < end; j += LANES) {
        vf w = exp_of_weight(load(s + j) - m);  /* read before the store below overwrites it */
        total += w;
        store_bf16((uint16_t *)s + j, w);
    }
    return 1.0f / hsum(total);
}

/* Dims 16 * half .. + 15 of a 32-dim block from the accumulators of its interleaved low and high
 * words: lane 4L + t of `lo` holds dim 8L + t, of `hi` dim 8L + 4 + t. */
static inline vf unpermute(vf lo, vf hi, int half) {
    return half ? SHUFFLE(lo, hi, 8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31)
                : SHUFFLE(lo, hi, 0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
}

/* Pass 3 for H query heads from h0 of the kv head at `head`: out = (sum over key pairs of their
 * weights' pair . the values' pairs) * inv, 2C accumulators a head. */
static inline __attribute__((always_inline)) void weigh_heads(const Args *a, const int32_t *table, int64_t nkeys,
                                                              int64_t head, int h0, const float *scores,
                                                              int64_t stride, const float *inv, float *out,
                                                              int early, const int C, const int H) {
    const uint16_t *v_cache = a->v_cache;
    __m512 acc[HEADS_AT_ONCE_64][8];  /* [H][2C] */
    for (int h = 0; h < H; h++)
        for (int c = 0; c < 2 * C; c++) acc[h][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nkeys; j += 2) {
        if (!early && j % LANES == 0)
            for (int h = 0; h < a->heads; h++) prefetch_keys(a, v_cache, 1, table, j + LANES, h, nkeys);
        const uint16_t *v0 = v_cache + key_offset(a, table, j) + head;
        const uint16_t *v1 = j + 1 < nkeys ? v_cache + key_offset(a, table, j + 1) + head : v0;  /* weight 0 */
        __m512bh pairs[8];
        for (int c = 0; c < C; c++) {
            __m512i x0 = _mm512_loadu_si512(v0 + c * 32), x1 = _mm512_loadu_si512(v1 + c * 32);
            pairs[2 * c] = (__m512bh)_mm512_unpacklo_epi16(x0, x1);
            pairs[2 * c + 1] = (__m512bh)_mm512_unpackhi_epi16(x0, x1);
        }
        for (int h = 0; h < H; h++) {
            const __m512bh w = pair_of((const uint16_t *)(scores + (h0 + h) * stride) + j);
            for (int c = 0; c < 2 * C; c++) acc[h][c] = _mm512_dpbf16_ps(acc[h][c], pairs[c], w);
        }
    }
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++)
            for (int half = 0; half < 2; half++)
                store(out + (h0 + h) * a->dim + c * 32 + half * 16,
                      unpermute((vf)acc[h][2 * c], (vf)acc[h][2 * c + 1], half) * inv[h0 + h]);
}

/* weigh_heads for every query head of every kv head, in as few passes over the kv head's values as
 * `at_once` heads a pass allows, of balanced sizes (Qwen2.5-0.5B's 7: 4 + 3). */
static inline __attribute__((always_inline)) void weigh_values(const Args *a, const int32_t *table, int64_t nkeys,
                                                               const float *scores, int64_t stride, const float *inv,
                                                               float *out, const int C, const int at_once) {
    const int group = a->heads / a->kv_heads;
    const int early = values_early(a, nkeys, 1);
    for (int g = 0; g < a->kv_heads; g++)
        for (int h0 = g * group, left = group, passes = (group + at_once - 1) / at_once; left > 0; passes--) {
            const int n = (left + passes - 1) / passes;
            const int64_t head = (int64_t)g * a->dim;
            switch (n) {  /* H constant in each, so that the accumulators stay in registers */
            case 1: weigh_heads(a, table, nkeys, head, h0, scores, stride, inv, out, early, C, 1); break;
            case 2: weigh_heads(a, table, nkeys, head, h0, scores, stride, inv, out, early, C, 2); break;
            case 3: weigh_heads(a, table, nkeys, head, h0, scores, stride, inv, out, early, C, 3); break;
            case 4: weigh_heads(a, table, nkeys, head, h0, scores, stride, inv, out, early, C, 4); break;
            case 5: weigh_heads(a, table, nkeys, head, h0, scores, stride, inv, out, early, C, 5); break;
            default: weigh_heads(a, table, nkeys, head, h0, scores, stride, inv, out, early, C, 6); break;
            }
            h0 += n, left -= n;
        }
}

/* One row at `pos` (keys 0..pos), every head, for head dims of 32, 64 or 128 (C = dim / 32). */
static inline __attribute__((always_inline)) void attend(const Args *a, const int32_t *table, int64_t row,
                                                         int64_t pos, uint16_t *q, float *scores, int64_t stride,
                                                         const int C, const int at_once) {
    const int64_t nkeys = pos + 1;
    float inv[BS_MAX_HEADS];
    for (int64_t i = 0; i < (int64_t)a->heads * a->dim; i += LANES)
        store_bf16(q + i, load(a->q + row * a->q_stride + i) * a->scale);
    score_keys(a, table, nkeys, q, scores, stride, C);
    for (int h = 0; h < a->heads; h++) inv[h] = softmax_head(scores + h * stride, nkeys);
    weigh_values(a, table, nkeys, scores, stride, inv, a->out + row * a->heads * a->dim, C, at_once);
}

int bs_decode_pairs_takes(int dim) { return dim == 32 || dim == 64 || dim == 128; }

void bs_decode_row_pairs(const Args *a, const int32_t *table, int64_t row, int64_t pos, uint16_t *q, float *scores,
                         int64_t stride) {
    if (a->dim == 32) attend(a, table, row, pos, q, scores, stride, 1, HEADS_AT_ONCE_64);
    else if (a->dim == 64) attend(a, table, row, pos, q, scores, stride, 2, HEADS_AT_ONCE_64);
    else attend(a, table, row, pos, q, scores, stride, 4, HEADS_AT_ONCE_128);
}

#else  /* no bf16 dot products: paged_attention.c's fp32 row path */

int bs_decode_pairs_takes(int dim) { return (void)dim, 0; }

void bs_decode_row_pairs(const Args *a, const int32_t *table, int64_t row, int64_t pos, uint16_t *q, float *scores,
                         int64_t stride) {
    (void)a, (void)table, (void)row, (void)pos, (void)q, (void)scores, (void)stride;
}

#endif
