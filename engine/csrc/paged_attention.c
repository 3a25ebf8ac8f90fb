/* Paged attention on the CPU: every query row of the packed step against its own request's keys,
 * read in place from the paged KV cache through the block table (no gathered copy).
 *
 * Layouts: q [rows, heads, dim] fp32 with rows q_stride floats apart (a view of the fused q/k
 * projection), out [rows, heads, dim] fp32 contiguous; k_cache and v_cache
 * [blocks, block_size, kv_heads, dim] fp32 or bf16; segment s owns the row_count[s] rows from
 * row_start[s] (other rows of q and out are not touched), whose queries sit at positions
 * num_cached[s] .., and row r at position p attends to keys 0..p (causal, bottom-right aligned) in the blocks
 * tables[s * table_stride + j / block_size] (block_size a power of two).
 *
 * One work item = up to LANES rows of one segment (16, or 8 on AVX2). Row by row (decodes; and every
 * row when the call is ``invariant``), a row walks its keys once, every head of a key together (one contiguous read of
 * the key's kv heads, as the cache stores them); chunks of many rows take attend_rows (below).
 * Per row: scores for every key, their max, exp and sum, then the weighted sum of the values, all
 * in fp32 with a fixed order that depends only on the row's own keys (a row's result does not
 * depend on the other rows of the step). A bf16 cache's rows multiply in bf16 instead where the CPU
 * has AVX512-BF16 (decode_pairs.c), in the same fixed order. Vector helpers: vec.h.
 */
#include <stdlib.h>

#include "batchscope.h"
#include "paged_rows.h"
#include "vec.h"

/* A thread's scratch: the row's scaled queries and accumulators (heads x dim), and each head's
 * scores (then weights) for every key, heads x stride. */
typedef struct {
    vf *q, *acc;
    float *scores;
    int64_t stride;
} Scratch;

static inline __attribute__((always_inline)) vf chunk(const void *cache, int bf16, int64_t at) {
    return bf16 ? load_bf16((const uint16_t *)cache + at) : load((const float *)cache + at);
}

/* Head dims whose loops are compiled with a constant count of vectors (64 and 128), as vectors. */
#define CHUNKS_64 (64 / LANES)
#define CHUNKS_128 (128 / LANES)
static inline int unrolled(int chunks) { return chunks == CHUNKS_64 || chunks == CHUNKS_128; }

/* The most accumulator vectors one weigh_head call keeps: head dim 128 in one call on AVX-512 (8 of
 * its 32 registers), in two on AVX2 (8 of 16). */
#define HEAD_PART 8
#if CHUNKS_128 == HEAD_PART  /* (a loop of one trip compiles to other code) */
#define EACH_HEAD_PART const int c = 0;
#else
#define EACH_HEAD_PART for (int c = 0; c < CHUNKS_128; c += HEAD_PART)
#endif

/* The dot product (lanes not yet added) of a scaled query with the key vector at `at`. */
static inline __attribute__((always_inline)) vf dot(const vf *q, const void *k_cache, int bf16, int64_t at, int chunks) {
    vf d = q[0] * chunk(k_cache, bf16, at);
    for (int c = 1; c < chunks; c++) d = fmadd(q[c], chunk(k_cache, bf16, at + (int64_t)c * LANES), d);
    return d;
}

/* Decode attention's arithmetic (2026-12-04, night): with a row's data in cache the kernel spent ~29 cycles
 * per (head, key), bound by dot()'s one chain at a time, a lane-by-lane running max, and bf16's
 * lane-crossing widening (three times per key for SmolLM2's groups of 3 query heads). Now 16 keys'
 * chains interleave (dot16), the max is kept per lane, a kv head's 16 keys are widened once
 * (widen_keys) and the values loaded as pairs (weigh_head_pairs): the same bits. Kernel alone,
 * bf16, 16 decode rows x ~225 keys, 30 layers' caches on huge pages, 2 threads: 0.81x the time with
 * the data in cache; from DRAM 0.85-0.93x at SmolLM2's heads, 0.72x and 0.80x at Qwen2.5-0.5B's and
 * 1.5B's (W1 decode steps 0.98x and 0.99x). From DRAM the misses in flight bound it: the prefetch
 * instructions wait for a free miss buffer (a third of its samples; prefetching further ahead, to L3
 * or every other line did not help), so fp32 caches gain only in cache (0.86x; from DRAM 1.00-1.07x,
 * W1 decode steps 1.005x). */

/* dot() of one query head with 16 keys (at off[k] + head), their chains interleaved: C constant, so
 * the 16 accumulators stay in registers (the same operations per key as dot(), the same bits; dot()'s
 * loop over a runtime count kept one dependent chain in flight). */
static inline __attribute__((always_inline)) void dot16(const vf *q, const void *k_cache, int bf16, const int64_t *off,
                                                        int64_t head, vf *dots, const int C) {
    vf d[LANES];
    for (int k = 0; k < LANES; k++) d[k] = q[0] * chunk(k_cache, bf16, off[k] + head);
    for (int c = 1; c < C; c++)
        for (int k = 0; k < LANES; k++) d[k] = fmadd(q[c], chunk(k_cache, bf16, off[k] + head + (int64_t)c * LANES), d[k]);
    for (int k = 0; k < LANES; k++) dots[k] = d[k];
}

/* dot16 over keys widened by widen_keys (key k at wide + k * C * 16). */
static inline __attribute__((always_inline)) void dot16_widened(const vf *q, const float *wide, vf *dots, const int C) {
    int64_t off[LANES];
    for (int k = 0; k < LANES; k++) off[k] = (int64_t)k * C * LANES;
    dot16(q, wide, 0, off, 0, dots, C);
}

/* The 16 keys' vectors of one kv head (at off[k] + head) widened to fp32, key k at wide[k * dim]:
 * the query heads that share the kv head (GQA) read them from here, converted once, not once each. */
static inline __attribute__((always_inline)) void widen_keys(const Args *a, const int64_t *off, int64_t head, float *wide) {
    for (int k = 0; k < LANES; k++)
        for (int c = 0; c < a->dim / LANES; c++)
            store(wide + k * a->dim + c * LANES, load_bf16((const uint16_t *)a->k_cache + off[k] + head + c * LANES));
}

/* Pass 1: every head's score for every key (sc->scores[head * stride + j]) and each head's max.
 * The keys are walked once, all kv heads of a key together (one contiguous read per key). */
static inline __attribute__((always_inline)) void score_keys(const Args *a, const int32_t *table, int64_t nkeys,
                                                             int bf16, const Scratch *sc, float *max) {
    const int group = a->heads / a->kv_heads, chunks = a->dim / LANES;
    const int early = values_early(a, nkeys, bf16);
    int64_t off[LANES];
    float wide[LANES * BS_MAX_DIM] __attribute__((aligned(64)));
    const int widen = bf16 && group > 1 && unrolled(chunks);
    vf vmax[BS_MAX_HEADS];
    for (int hq = 0; hq < a->heads; hq++) vmax[hq] = (vf){0} - 3.4e38f;
    for (int64_t ahead = 0; ahead < KEYS_AHEAD * LANES; ahead += LANES)
        for (int hq = 0; hq < a->heads; hq++) prefetch_keys(a, a->k_cache, bf16, table, ahead, hq, nkeys);
    int64_t j = 0;
    for (; j + LANES <= nkeys; j += LANES) {  /* 16 keys at a time, their dot products reduced together */
        for (int k = 0; k < LANES; k++) off[k] = key_offset(a, table, j + k);
        for (int hq = 0; hq < a->heads; hq++) {
            prefetch_keys(a, a->k_cache, bf16, table, j + KEYS_AHEAD * LANES, hq, nkeys);
            if (early) prefetch_keys(a, a->v_cache, bf16, table, j, hq, nkeys);
            int64_t head = (int64_t)(hq / group) * a->dim;
            vf dots[LANES];
            if (widen && hq % group == 0) widen_keys(a, off, head, wide);
            if (widen && chunks == CHUNKS_64) dot16_widened(sc->q + hq * chunks, wide, dots, CHUNKS_64);
            else if (widen) dot16_widened(sc->q + hq * chunks, wide, dots, CHUNKS_128);
            else if (chunks == CHUNKS_64) dot16(sc->q + hq * chunks, a->k_cache, bf16, off, head, dots, CHUNKS_64);
            else if (chunks == CHUNKS_128) dot16(sc->q + hq * chunks, a->k_cache, bf16, off, head, dots, CHUNKS_128);
            else
                for (int k = 0; k < LANES; k++) dots[k] = dot(sc->q + hq * chunks, a->k_cache, bf16, off[k] + head, chunks);
            vf s = reduce_lanes(dots);
            store(sc->scores + hq * sc->stride + j, s);
            vmax[hq] = vmaxf(s, vmax[hq]);
        }
    }
    for (int hq = 0; hq < a->heads; hq++) {
        max[hq] = -3.4e38f;
        for (int i = 0; i < LANES; i++) max[hq] = vmax[hq][i] > max[hq] ? vmax[hq][i] : max[hq];
    }
    for (; j < nkeys; j++) {
        int64_t at = key_offset(a, table, j);
        for (int hq = 0; hq < a->heads; hq++) {
            float s = hsum(dot(sc->q + hq * chunks, a->k_cache, bf16, at + (int64_t)(hq / group) * a->dim, chunks));
            sc->scores[hq * sc->stride + j] = s;
            max[hq] = s > max[hq] ? s : max[hq];
        }
    }
}

/* acc[0..C) += the 16 (or n) keys' weights times their values: C chains, one per vector of the
 * head, each over the keys in order (C constant: the chains stay in registers and overlap). */
static inline __attribute__((always_inline)) void weigh_head(const Args *a, const int64_t *off, int n, int64_t head,
                                                             const float *w, vf *acc, int bf16, const int C) {
    vf sum[C];
    for (int c = 0; c < C; c++) sum[c] = acc[c];
    for (int k = 0; k < n; k++)
        for (int c = 0; c < C; c++) sum[c] += w[k] * chunk(a->v_cache, bf16, off[k] + head + (int64_t)c * LANES);
    for (int c = 0; c < C; c++) acc[c] = sum[c];
}

/* A bf16 cache's values as pairs (head dims of 64 and 128): one 64-byte load holds 32 values, the even
 * ones in the low halves of its 16 words and the odd ones in the high halves; a shift and a mask
 * widen them, with no lane-crossing conversion (which shares its port with the FMAs). The
 * accumulators keep that order, even then odd per 32 values, and the row's output puts them back in
 * place (unpair): each value is weighed and summed as before, so the same bits. */
static inline int paired_values(int bf16, int chunks) { return bf16 && unrolled(chunks); }

static inline __attribute__((always_inline)) void weigh_head_pairs(const Args *a, const int64_t *off, int n, int64_t head,
                                                                   const float *w, vf *acc, const int P) {
    vf sum[2 * P];
    for (int c = 0; c < 2 * P; c++) sum[c] = acc[c];
    for (int k = 0; k < n; k++)
        for (int p = 0; p < P; p++) {
            vu x = *(const vu_u *)((const uint16_t *)a->v_cache + off[k] + head + (int64_t)p * 2 * LANES);
            sum[2 * p] += w[k] * (vf)(x << 16);
            sum[2 * p + 1] += w[k] * (vf)(x & 0xffff0000u);
        }
    for (int c = 0; c < 2 * P; c++) acc[c] = sum[c];
}

/* Pass 3: acc[head] = sum over keys of weight * value, 16 keys at a time. (The same additions in
 * the same order as one vector at a time, which made each a chain of 16 dependent FMAs.) */
static inline __attribute__((always_inline)) void weigh_values(const Args *a, const int32_t *table, int64_t nkeys,
                                                               int bf16, const Scratch *sc) {
    const int group = a->heads / a->kv_heads, chunks = a->dim / LANES, early = values_early(a, nkeys, bf16);
    int64_t off[LANES];
    for (int64_t j = 0; j < nkeys; j += LANES) {
        int n = nkeys - j < LANES ? (int)(nkeys - j) : LANES;
        for (int k = 0; k < n; k++) off[k] = key_offset(a, table, j + k);
        for (int hq = 0; hq < a->heads; hq++) {
            if (!early) prefetch_keys(a, a->v_cache, bf16, table, j + LANES, hq, nkeys);
            const float *w = sc->scores + hq * sc->stride + j;
            int64_t head = (int64_t)(hq / group) * a->dim;
            vf *acc = sc->acc + hq * chunks;
            if (paired_values(bf16, chunks) && chunks == CHUNKS_64) weigh_head_pairs(a, off, n, head, w, acc, CHUNKS_64 / 2);
            else if (paired_values(bf16, chunks)) {
                EACH_HEAD_PART weigh_head_pairs(a, off, n, head + (int64_t)c * LANES, w, acc + c, HEAD_PART / 2);
            }
            else if (chunks == CHUNKS_64) weigh_head(a, off, n, head, w, acc, bf16, CHUNKS_64);
            else if (chunks == CHUNKS_128) {
                EACH_HEAD_PART weigh_head(a, off, n, head + (int64_t)c * LANES, w, acc + c, bf16, HEAD_PART);
            }
            else
                for (int c = 0; c < chunks; c++) weigh_head(a, off, n, head + (int64_t)c * LANES, w, acc + c, bf16, 1);
        }
    }
}

/* Values c * LANES .. (c + 1) * LANES - 1 from the even and odd accumulators of their 2 LANES
 * (half = c & 1). */
static inline vf unpair(vf even, vf odd, int half) {
#if LANES == 16
    return half ? SHUFFLE(even, odd, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)
                : SHUFFLE(even, odd, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
#else
    return half ? SHUFFLE(even, odd, 4, 12, 5, 13, 6, 14, 7, 15) : SHUFFLE(even, odd, 0, 8, 1, 9, 2, 10, 3, 11);
#endif
}

/* One query row at position `pos`, every head, keys through `table`. */
static inline __attribute__((always_inline)) void attend(const Args *a, const int32_t *table, int64_t row,
                                                         int64_t pos, Scratch *sc, int bf16) {
    const int chunks = a->dim / LANES;
    const int64_t nkeys = pos + 1;
    float max[BS_MAX_HEADS], inv[BS_MAX_HEADS];
    for (int hq = 0; hq < a->heads; hq++) {
        const float *qp = a->q + row * a->q_stride + (int64_t)hq * a->dim;
        for (int c = 0; c < chunks; c++) sc->q[hq * chunks + c] = load(qp + c * LANES) * a->scale;
        for (int c = 0; c < chunks; c++) sc->acc[hq * chunks + c] = (vf){0};
    }
    score_keys(a, table, nkeys, bf16, sc, max);
    for (int hq = 0; hq < a->heads; hq++) {  /* pass 2: weights exp(score - max) in place, their sum */
        float *s = sc->scores + hq * sc->stride;
        for (int64_t j = nkeys; j < nkeys + LANES; j++) s[j] = -3.4e38f;  /* the last chunk's tail */
        vf total = {0};
        for (int64_t j = 0; j < nkeys; j += LANES) {
            vf w = vexp_nonpositive(load(s + j) - max[hq]);
            store(s + j, w);
            total += w;
        }
        inv[hq] = 1.0f / hsum(total);
    }
    weigh_values(a, table, nkeys, bf16, sc);
    const int paired = paired_values(bf16, chunks);
    for (int hq = 0; hq < a->heads; hq++)
        for (int c = 0; c < chunks; c++) {
            const vf *acc = sc->acc + hq * chunks;
            vf v = paired ? unpair(acc[c & ~1], acc[c | 1], c & 1) : acc[c];
            store(a->out + (row * a->heads + hq) * a->dim + c * LANES, v * inv[hq]);
        }
}

static void attend_f32(const Args *a, const int32_t *table, int64_t row, int64_t pos, Scratch *sc) {
    attend(a, table, row, pos, sc, 0);
}

/* A bf16 cache's rows on bf16 products where the CPU has them (decode_pairs.c), else widened to fp32. */
static void attend_bf16(const Args *a, const int32_t *table, int64_t row, int64_t pos, Scratch *sc) {
    if (bs_decode_pairs_takes(a->dim)) bs_decode_row_pairs(a, table, row, pos, (uint16_t *)sc->q, sc->scores, sc->stride);
    else attend(a, table, row, pos, sc, 1);
}

/* Many rows of one segment at once (a prefill chunk): rows in the 16 vector lanes. Each query head's
 * queries are transposed once (qt[d] = that head's d-th component of the 16 rows), so a key's score
 * for all 16 rows is one multiply-add chain over d with the key's components broadcast, eight keys
 * interleaved; the causal mask is a per-lane compare; the softmax runs lane-wise over the keys;
 * the values are weighed for several rows at a time (weigh_chunk). Twice the throughput of row by
 * row for chunks, but a different rounding of the dot products, so ``invariant`` calls never take
 * this path. fp32 keys are broadcast from the cache where they lie; bf16 keys are widened into a copy
 * first (the fp32 ones were copied too, 64 loads and stores a head per 8 keys). With that and the queries
 * transposed in registers (transpose_queries), a W1-like fp32 step's attention (8 decode rows ~225
 * keys, 170 rows from 0 and 78 after 128 cached, 30 layers' caches, 2 threads, alternating with the
 * old build) takes 0.924x the time at SmolLM2's heads, 0.909x at Qwen2.5-0.5B's and 0.926x at
 * 1.5B's, each change about half; bf16 0.986x; the same bits. W1 at 135M fp32 step by step
 * (benchmarks.lockstep, 5 rounds): prefill-heavy steps 0.991x [0.990-1.002].
 * Since then (2026-12-07, later), the same bits: a value vector is loaded once for all the rows of a
 * weigh_rows call (GCC had folded the load into every row's multiply-add: R loads of 64 bytes from L2
 * per vector), head_dim 64 weighs 6 rows a call (6 + 6 + 4), not 4, the softmax's max is kept as the
 * scores are stored (not in a pass of its own) and its weights take vexp_nonpositive. fp32 caches: a
 * W1-like step's attention 0.857x the time at SmolLM2's heads, 0.884x at Qwen2.5-0.5B's, 0.907x at
 * 1.5B's (the register alone 0.94x, 6 rows 0.96x, the exp 0.97x); W1 at 135M fp32 step by step
 * (3 rounds): prefill-heavy steps 0.993x [0.992-0.995], all steps 0.994x. */
#define MULTI_ROWS LANES
#define MIN_MULTI_ROWS 4
#define KEY_STEP 8

static inline __attribute__((always_inline)) void score_rows(const Args *a, const int32_t *table, int hq, int64_t nkeys,
                                                             int64_t pos0, int bf16, const vf *qt, vf *st, vf *max) {
    const int64_t head = (int64_t)(hq / (a->heads / a->kv_heads)) * a->dim;
    vi lane;
    for (int i = 0; i < LANES; i++) lane[i] = i;
    int64_t j = 0;
    for (; j < nkeys; j += KEY_STEP) {
        int n = nkeys - j < KEY_STEP ? (int)(nkeys - j) : KEY_STEP;
        vf acc[KEY_STEP];
        const float *key[KEY_STEP];
        float wide[KEY_STEP][BS_MAX_DIM] __attribute__((aligned(64)));  /* bf16 keys, widened */
        for (int k = 0; k < KEY_STEP; k++) {  /* a short last group: its first key again, never stored */
            const int64_t at = key_offset(a, table, j + (k < n ? k : 0)) + head;
            if (bf16)
                for (int c = 0; c < a->dim / LANES; c++) store(wide[k] + c * LANES, chunk(a->k_cache, 1, at + c * LANES));
            key[k] = bf16 ? wide[k] : (const float *)a->k_cache + at;
            acc[k] = (vf){0};
        }
        for (int d = 0; d < a->dim; d++)  /* all KEY_STEP keys, so the accumulators stay in registers */
            for (int k = 0; k < KEY_STEP; k++) acc[k] = key[k][d] * qt[d] + acc[k];
        for (int k = 0; k < n; k++) {
            vi visible = (lane + (vi){0} + (int)pos0) >= (vi){0} + (int)(j + k);  /* row position >= key */
            st[j + k] = vselect(visible, acc[k], (vf){0} - 3.4e38f);
            *max = vmaxf(st[j + k], *max);
        }
    }
}

/* Rows i0 .. i0 + R - 1 of a chunk (those below `rows` stored): the weighted sum of the values, each
 * row's keys in order, divided by the row's total. C vectors per head row; called with constant C and
 * R so that the R x C accumulators stay in registers (rows past `rows` are computed, never stored). */
static inline __attribute__((always_inline)) void weigh_rows(const Args *a, const int32_t *table, int64_t nkeys,
                                                             int64_t head, const vf *st, vf total, int i0, int rows,
                                                             float *out, int bf16, const int C, const int R) {
    vf acc[R][C];
    for (int i = 0; i < R; i++)
        for (int c = 0; c < C; c++) acc[i][c] = (vf){0};
    for (int64_t j = 0; j < nkeys; j++) {
        int64_t at = key_offset(a, table, j) + head;
        for (int c = 0; c < C; c++) {
            vf v = in_register(chunk(a->v_cache, bf16, at + (int64_t)c * LANES));  /* one load for the R rows */
            for (int i = 0; i < R; i++) acc[i][c] = st[j][(i0 + i) & (LANES - 1)] * v + acc[i][c];
        }
    }
    for (int i = 0; i < R && i0 + i < rows; i++)
        for (int c = 0; c < C; c++)
            store(out + (int64_t)(i0 + i) * a->heads * a->dim + c * LANES, acc[i][c] * (1.0f / total[i0 + i]));
}

#if LANES == 16
/* Every row of a chunk's query head, in weigh_rows calls whose accumulators stay in registers: 6 + 6 + 4
 * rows at head_dim 64 (6 x 4 vectors), 2 at a time at 128, 4 at 16, 1 otherwise. */
static inline __attribute__((always_inline)) void weigh_chunk(const Args *a, const int32_t *table, int64_t nkeys,
                                                              int64_t head, const vf *st, vf total, int rows,
                                                              float *out, int bf16) {
    const int chunks = a->dim / LANES;
    if (chunks == 4) {
        for (int i0 = 0; i0 < 12 && i0 < rows; i0 += 6)
            weigh_rows(a, table, nkeys, head, st, total, i0, rows, out, bf16, 4, 6);
        if (rows > 12) weigh_rows(a, table, nkeys, head, st, total, 12, rows, out, bf16, 4, 4);
    } else if (chunks == 8) {
        for (int i0 = 0; i0 < rows; i0 += 2) weigh_rows(a, table, nkeys, head, st, total, i0, rows, out, bf16, 8, 2);
    } else if (chunks == 1) {
        for (int i0 = 0; i0 < rows; i0 += 4) weigh_rows(a, table, nkeys, head, st, total, i0, rows, out, bf16, 1, 4);
    } else {
        for (int i0 = 0; i0 < rows; i0++) weigh_rows(a, table, nkeys, head, st, total, i0, rows, out, bf16, chunks, 1);
    }
}
#else
/* The same on 8-float vectors (16 registers): the head's dims 32 at a time (4 vectors), the chunk's
 * 8 rows as 3 + 3 + 2 (12 accumulators, the value vector and the weight); 1 row and the whole head
 * for head dims not a multiple of 32. */
static inline __attribute__((always_inline)) void weigh_chunk(const Args *a, const int32_t *table, int64_t nkeys,
                                                              int64_t head, const vf *st, vf total, int rows,
                                                              float *out, int bf16) {
    const int chunks = a->dim / LANES;
    if (chunks % 4) {
        for (int i0 = 0; i0 < rows; i0++) weigh_rows(a, table, nkeys, head, st, total, i0, rows, out, bf16, chunks, 1);
        return;
    }
    for (int c = 0; c < chunks; c += 4) {
        const int64_t part = (int64_t)c * LANES;
        for (int i0 = 0; i0 < 6 && i0 < rows; i0 += 3)
            weigh_rows(a, table, nkeys, head + part, st, total, i0, rows, out + part, bf16, 4, 3);
        if (rows > 6) weigh_rows(a, table, nkeys, head + part, st, total, 6, rows, out + part, bf16, 4, 2);
    }
}
#endif

/* qt[d] = query head hq's component d of rows row0 .. row0 + 15, scaled (zeros past `rows`): each 16
 * components of the 16 rows loaded as 16 vectors and transposed (vec.h), the same products as lane by
 * lane, so the same bits. Lane by lane it cost ~4% of the kernel at a W1-like fp32 step (the note above
 * score_rows). */
static void transpose_queries(const Args *a, int64_t row0, int rows, int hq, vf *qt) {
    for (int c = 0; c < a->dim; c += LANES) {
        vf r[LANES];
        for (int i = 0; i < LANES; i++)
            r[i] = i < rows ? load(a->q + (row0 + i) * a->q_stride + (int64_t)hq * a->dim + c) * a->scale : (vf){0};
        transpose_lanes(r);
        for (int d = 0; d < LANES; d++) qt[c + d] = r[d];
    }
}

static inline __attribute__((always_inline)) void attend_rows(const Args *a, const int32_t *table, int64_t row0,
                                                              int rows, int64_t pos0, Scratch *sc, int bf16) {
    const int group = a->heads / a->kv_heads;
    const int64_t nkeys = pos0 + rows;
    vf *qt = sc->q, *st = (vf *)sc->scores;  /* qt: [dim] vectors over rows; st: [nkeys] vectors over rows */
    for (int hq = 0; hq < a->heads; hq++) {
        transpose_queries(a, row0, rows, hq, qt);
        vf max = (vf){0} - 3.4e38f, total = {0};
        score_rows(a, table, hq, nkeys, pos0, bf16, qt, st, &max);
        for (int64_t j = 0; j < nkeys; j++) st[j] = vexp_nonpositive(st[j] - max), total += st[j];
        weigh_chunk(a, table, nkeys, (int64_t)(hq / group) * a->dim, st, total, rows,
                    a->out + (row0 * a->heads + hq) * a->dim, bf16);
    }
}

static void attend_rows_f32(const Args *a, const int32_t *t, int64_t row0, int rows, int64_t pos0, Scratch *sc) {
    attend_rows(a, t, row0, rows, pos0, sc, 0);
}

static void attend_rows_bf16(const Args *a, const int32_t *t, int64_t row0, int rows, int64_t pos0, Scratch *sc) {
    attend_rows(a, t, row0, rows, pos0, sc, 1);
}

#define PAIRS_MIN_ROWS 16

/* Whether segment s goes to the bf16 prefill kernel (attention_pairs.c) instead of this file's paths. */
static inline int on_pairs(int pairs, const int32_t *row_count, int s) { return pairs && row_count[s] >= PAIRS_MIN_ROWS; }

/* One work item: up to MULTI_ROWS rows of one segment, and its rank in the hand-out order. */
typedef struct {
    int64_t rank;
    int32_t segment, first;
} Item;

static int higher_rank_first(const void *x, const void *y) {
    int64_t a = ((const Item *)x)->rank, b = ((const Item *)y)->rank;
    return (a < b) - (a > b);
}

/* The work items of the segments not on pairs (attention_pairs.c), in the order the threads take
 * them: the pieces of prefill chunks first, the costliest (rows x keys) first, so that a long one does not finish
 * alone (a chunk's last rows attend to the most keys; 256 rows after 128 cached: 1.28x), then the
 * decode rows in the step's order, which fill in (sorted by their context too, they made W1's
 * bf16 prefill-heavy steps 4% slower). Each row's result stays its own. */
static int64_t list_items(const int32_t *row_start, const int32_t *row_count, const int32_t *num_cached,
                          int num_segments, int pairs, Item *items) {
    int64_t n = 0;
    for (int s = 0; s < num_segments; s++) {
        if (on_pairs(pairs, row_count, s)) continue;
        for (int r = row_start[s]; r < row_start[s] + row_count[s]; r += MULTI_ROWS, n++) {
            int64_t rows = row_start[s] + row_count[s] - r < MULTI_ROWS ? row_start[s] + row_count[s] - r : MULTI_ROWS;
            int64_t cost = rows * (num_cached[s] + r - row_start[s] + rows);
            items[n] = (Item){row_count[s] > 1 ? cost : -n, s, r};
        }
    }
    qsort(items, n, sizeof(Item), higher_rank_first);
    return n;
}

/* The step's new keys and values (kv heads x dim per row, rows *_stride floats apart) into their slots,
 * rounded to bf16 (to nearest even) for a bf16 cache: torch's index_copy_ of .to(dtype), in one pass. */
static void write_kv(const float *k, int64_t k_stride, const float *v, int64_t v_stride, const int64_t *slots,
                     int64_t rows, void *k_cache, void *v_cache, int bf16, int64_t width, int num_threads) {
#pragma omp parallel for num_threads(num_threads) schedule(static) if (rows >= 16)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < width; i++) {
            int64_t to = slots[r] * width + i;
            float kv = k[r * k_stride + i], vv = v[r * v_stride + i];
            if (bf16) ((uint16_t *)k_cache)[to] = to_bf16(kv), ((uint16_t *)v_cache)[to] = to_bf16(vv);
            else ((float *)k_cache)[to] = kv, ((float *)v_cache)[to] = vv;
        }
}

/* Writes the step's keys and values (write_kv), then attends. 0 on success; -1 for shapes this kernel
 * does not take (the caller falls back); -2 out of memory. */
int bs_paged_attention(const float *k_new, int64_t k_stride, const float *v_new, int64_t v_stride, const int64_t *slots,
                       int64_t rows,
                       const float *q, int64_t q_stride, float *out, void *k_cache, void *v_cache, int bf16,
                       const int32_t *row_start, const int32_t *row_count, const int32_t *num_cached, const int32_t *tables,
                       int64_t table_stride, int num_segments, int heads, int kv_heads, int dim,
                       int block_size, float scale, int max_keys, int invariant, int num_threads) {
    if (dim % LANES || dim > BS_MAX_DIM || heads % kv_heads || heads > BS_MAX_HEADS) return -1;
    if (block_size < 1 || block_size & (block_size - 1)) return -1;  /* a power of two */
    write_kv(k_new, k_stride, v_new, v_stride, slots, rows, k_cache, v_cache, bf16, (int64_t)kv_heads * dim, num_threads);
    Args a = {q, q_stride, out, k_cache, v_cache, heads, kv_heads, dim, block_size, scale};
    void (*attend_row)(const Args *, const int32_t *, int64_t, int64_t, Scratch *) = bf16 ? attend_bf16 : attend_f32;
    void (*many)(const Args *, const int32_t *, int64_t, int, int64_t, Scratch *) = bf16 ? attend_rows_bf16 : attend_rows_f32;
    const int pairs = bf16 && !invariant && dim % 32 == 0 && bs_prefill_attention_pairs_available();
    int64_t num_items = 0;
    for (int s = 0; s < num_segments; s++) num_items += (row_count[s] + MULTI_ROWS - 1) / MULTI_ROWS;
    Item *items = malloc(sizeof(Item) * (num_items + 1));
    int32_t *paired = malloc(sizeof(int32_t) * (num_segments + 1));
    if (!items || !paired) return free(items), free(paired), -2;
    int num_paired = 0;
    for (int s = 0; s < num_segments; s++)
        if (on_pairs(pairs, row_count, s)) paired[num_paired++] = s;
    const int64_t n = list_items(row_start, row_count, num_cached, num_segments, pairs, items);
    int status = num_paired ? bs_prefill_attention_pairs(&a, paired, num_paired, row_start, row_count, num_cached,
                                                         tables, table_stride, max_keys, num_threads) : 0;
    free(paired);
    if (status != 0) return free(items), status;
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        const int64_t vectors = (int64_t)heads * (dim / LANES), stride = max_keys + LANES;
        const int64_t q_vectors = vectors > BS_MAX_DIM ? vectors : BS_MAX_DIM;  /* also the transposed queries */
        const int64_t score_floats = (int64_t)heads * stride > LANES * stride ? (int64_t)heads * stride : LANES * stride;
        Scratch sc = {aligned_alloc(64, sizeof(vf) * q_vectors), aligned_alloc(64, sizeof(vf) * vectors),
                      aligned_alloc(64, sizeof(float) * ((score_floats + LANES - 1) / LANES * LANES)), stride};
        if (!sc.q || !sc.acc || !sc.scores) flag_failure(&failed);
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++) {
            if (has_failed(&failed)) continue;
            int s = items[i].segment;
            int64_t first = items[i].first, end = row_start[s] + row_count[s];
            int rows = end - first < MULTI_ROWS ? (int)(end - first) : MULTI_ROWS;
            const int32_t *table = tables + s * table_stride;
            int64_t pos = num_cached[s] + first - row_start[s];
            if (!invariant && rows >= MIN_MULTI_ROWS) {
                many(&a, table, first, rows, pos, &sc);
                continue;
            }
            for (int64_t row = first; row < first + rows; row++) attend_row(&a, table, row, pos + row - first, &sc);
        }
        free(sc.q), free(sc.acc), free(sc.scores);
    }
    free(items);
    return failed ? -2 : 0;
}
