/* A decode row's walk over the paged KV cache, shared by the row-by-row attention of paged_attention.c
 * (fp32 arithmetic) and decode_pairs.c (bf16 products): where a key lies, and which keys and values
 * to ask for ahead. */
#ifndef BATCHSCOPE_PAGED_ROWS_H
#define BATCHSCOPE_PAGED_ROWS_H
#include <stdint.h>

#include "batchscope.h"
#include "vec.h"

/* Where key j's vectors (all kv heads) start in the cache, in elements. */
static inline int64_t key_offset(const Args *a, const int32_t *table, int64_t j) {
    const int bs = a->block_size;
    int64_t slot = (int64_t)table[j >> __builtin_ctz(bs)] * bs + (j & (bs - 1));
    return slot * a->kv_heads * a->dim;
}

/* Decode attention reads every key and value of a row once, block after block, and the blocks are
 * scattered in the pool: the loads must be asked for well ahead. Prefetches go to L2 (prefetcht1):
 * into L1 the misses in flight are too few to stream. Pass 1 asks for the keys KEYS_AHEAD groups of
 * 16 ahead (the row's first groups at its start) and, when the row's values fit VALUES_IN_L2, for
 * the values of the group it scores, so that pass 3 finds them in L2; a longer row's pass 3 asks
 * for the next group's values instead. 24 decode rows x 225 keys, SmolLM2's heads, 30 layers' caches
 * on huge pages, 2 threads: fp32 1.26x (14.9 -> 11.8 ms), bf16 1.21x (11.8 -> 9.8 ms) against
 * prefetching only the next group into L1; a 3,000-key row 1.5x. W1 step by step (benchmarks.lockstep,
 * 3 rounds): decode steps 0.95x the time at SmolLM2-135M fp32 (0.94-0.96), 0.98x at Qwen2.5-0.5B's
 * shape in bf16 (0.91-1.01). (Scoring with the query in registers and weighing the values once for
 * all query heads of a kv head: 1.1-1.17x on the kernel alone with its data in L2, 1.02x slower in
 * W1 at 135M fp32, 0.99x at 0.5B bf16: not kept.) */
#define KEYS_AHEAD 2
#define VALUES_IN_L2 (256 << 10)

/* The share of the 16 keys from `next` (all kv heads of each) that query head hq of `heads` asks
 * for: spread over the heads' work rather than one burst, the loads stay in flight while it computes
 * (a burst waits for free miss buffers). Always inlined: GCC 12 takes a function of prefetches only
 * for one without effects and drops its calls. */
static inline __attribute__((always_inline)) void prefetch_keys(const Args *a, const void *cache, int bf16,
                                                                const int32_t *table, int64_t next, int hq,
                                                                int64_t nkeys) {
    const int64_t bytes = (int64_t)a->kv_heads * a->dim * (bf16 ? 2 : 4);
    const int64_t first = next + hq * LANES / a->heads, end = next + (hq + 1) * LANES / a->heads;
    for (int64_t key = first; key < end && key < nkeys; key++) {
        const char *row = (const char *)cache + key_offset(a, table, key) * (bf16 ? 2 : 4);
        for (int64_t at = 0; at < bytes; at += 64) __builtin_prefetch(row + at, 0, 2);
    }
}

/* Whether pass 1 prefetches the row's values (they fit in L2 until pass 3 reads them). */
static inline int values_early(const Args *a, int64_t nkeys, int bf16) {
    return nkeys * a->kv_heads * a->dim * (bf16 ? 2 : 4) <= VALUES_IN_L2;
}

#endif
