/* What the attention kernels share (paged_attention.c, attention_amx.c): one call's arguments. */
#ifndef BATCHSCOPE_ATTENTION_H
#define BATCHSCOPE_ATTENTION_H
#include <stdint.h>

typedef struct {
    const float *q;
    int64_t q_stride;
    float *out;
    const void *k_cache, *v_cache;
    int heads, kv_heads, dim, block_size;
    float scale;
} Args;

/* The segments listed in `segments` through AMX tiles (bf16 caches); -1 where the CPU has no AMX. */
int bs_prefill_attention_amx(const Args *a, const int32_t *segments, int count, const int32_t *row_start,
                             const int32_t *row_count, const int32_t *num_cached, const int32_t *tables,
                             int64_t table_stride, int max_keys, int num_threads);

#endif
