/* The CPU kernels' interface, in one place: every function the library exports and every struct
 * that crosses it, those Python mirrors with ctypes (engine/cpu_kernels.py: LinearDesc, LayerDesc,
 * StepDesc) and the one the attention files share (Args). Every .c file includes it and declares
 * nothing of another file's; tests/test_c_interface.py builds with -Werror=missing-prototypes, so
 * an export missing here fails, and checks these prototypes against cpu_kernels.SIGNATURES. At
 * load, cpu_kernels.py compares BS_ABI_VERSION and the table bs_interface() gives (struct sizes,
 * field offsets and sizes, the constants below) with its own and refuses a library that differs.
 * Bump BS_ABI_VERSION when a function's arguments change meaning without changing the table. */
#ifndef BATCHSCOPE_H
#define BATCHSCOPE_H
#include <stdint.h>

#define BS_ABI_VERSION 3
#define BS_MAX_HEADS 128  /* query heads paged attention holds per row (cpu_kernels.MAX_HEADS) */
#define BS_MAX_DIM 256    /* head dim */
#define BS_THREADED_ELEMENTS 65536  /* element-wise passes over more floats than this use every thread */

/* The linear kernel a fused decoder layer runs (cpu_kernels.LINEAR_KERNELS). */
enum { LINEAR_FP32 = 0, LINEAR_WIDEN = 1, LINEAR_PAIRS = 2, LINEAR_AMX = 3 };

typedef struct {
    const void *weight;  /* packed */
    const float *bias;   /* NULL, or as long as the packed outputs */
    int64_t out, in;
} LinearDesc;

/* One decoder layer (decoder_layer.c). */
typedef struct {
    LinearDesc qkv, o, gate_up, down;
    const float *norm1, *norm2;
    float eps;
    int kernel, heads, kv_heads, dim;
} LayerDesc;

/* One step of a decoder layer: the attention plan and the scratch rows (decoder_layer.c). */
typedef struct {
    int64_t rows;
    const float *cos, *sin;  /* rotary rows [rows, dim] (sin signed) */
    const int64_t *slots;
    const int32_t *row_start, *row_count, *num_cached, *tables;
    int64_t table_stride;
    int segments, block_size, max_keys, invariant, bf16_cache, threads;
    float scale;
    /* scratch: [rows, hidden / qkv / q / 2 inter / inter / hidden] floats (h and act hold bf16 on the pairs kernel) */
    float *h, *qkv, *attn, *gate_up, *act, *delta;
} StepDesc;

/* One attention call's arguments, shared by paged_attention.c and attention_pairs.c (not Python's). */
typedef struct {
    const float *q;
    int64_t q_stride;
    float *out;
    const void *k_cache, *v_cache;
    int heads, kv_heads, dim, block_size;
    float scale;
} Args;

/* One entry of bs_interface's table: "sizeof(T)", "offsetof(T, f)", "sizeof(T.f)" or a constant. */
typedef struct {
    const char *name;
    int64_t value;
} InterfaceFact;

/* interface.c */
int bs_abi_version(void);
const InterfaceFact *bs_interface(int *count);
/* the widest vector registers this build targets, and the kernels' vectors (vec.h), in bits */
int bs_vector_bits(void);
int bs_kernel_vector_bits(void);

/* argmax.c: out[r] = the index of row r's first largest value (a NaN counts as the largest) */
void bs_argmax_rows(const float *x, int64_t rows, int64_t cols, int64_t stride, int64_t *out, int num_threads);

/* nucleus.c: theta[r] = the least probability row r's top-p nucleus keeps (tokens >= theta stay);
 * top_p[r] in (0, 1); 0 or -2 (out of memory) */
int bs_nucleus_thresholds(const float *probs, int64_t rows, int64_t vocab, const double *top_p, float *theta,
                          int num_threads);

/* elementwise.c */
void bs_add_rms_norm(float *x, const float *delta, const float *weight, void *out, int bf16, int64_t rows,
                     int64_t hidden, float eps, int num_threads);
void bs_silu_mul(const float *gate_up, void *out, int bf16, int64_t rows, int64_t inter, int num_threads);
void bs_rotary(float *qk, int64_t row_stride, int64_t rows, int heads, int dim, const float *cos, const float *sin,
               int num_threads);

/* gemm.c */
void bs_pack_linear(const void *w, int bf16, int64_t n, int64_t k, void *packed);
void bs_linear(const float *x, int64_t x_stride, const void *packed, int bf16, const float *bias, float *out,
               int64_t m, int64_t n, int64_t k, int num_threads);

/* gemm_bf16.c */
int bs_linear_bf16_pairs_available(void);
void bs_pack_linear_pairs(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed);
int bs_linear_bf16_pairs(const float *x, int64_t x_stride, const uint16_t *packed, const float *bias, float *out,
                         int64_t m, int64_t n, int64_t k, int num_threads);
/* the same on rows already rounded to bf16 (xb [m, k] contiguous, k even); -1 where k is odd */
int bs_linear_bf16_rows(const uint16_t *xb, const uint16_t *packed, const float *bias, float *out, int64_t m,
                        int64_t n, int64_t k, int num_threads);

/* gemm_amx.c */
int bs_amx_available(void);
int64_t bs_amx_depth(int64_t k);
void bs_pack_linear_amx(const uint16_t *w, int64_t n, int64_t k, uint16_t *packed);
int bs_linear_amx(const float *x, int64_t x_stride, const uint16_t *packed, const float *bias, float *out,
                  int64_t m, int64_t n, int64_t k, int num_threads);

/* paged_attention.c */
int bs_paged_attention(const float *k_new, int64_t k_stride, const float *v_new, int64_t v_stride, const int64_t *slots,
                       int64_t rows, const float *q, int64_t q_stride, float *out, void *k_cache, void *v_cache, int bf16,
                       const int32_t *row_start, const int32_t *row_count, const int32_t *num_cached,
                       const int32_t *tables, int64_t table_stride, int num_segments, int heads, int kv_heads, int dim,
                       int block_size, float scale, int max_keys, int invariant, int num_threads);

/* attention_pairs.c: the segments listed in `segments` on bf16 products (bf16 caches; AMX tiles or
 * AVX512-BF16 dot products); -1 where the CPU has neither. */
int bs_prefill_attention_pairs_available(void);
int bs_prefill_attention_pairs(const Args *a, const int32_t *segments, int count, const int32_t *row_start,
                               const int32_t *row_count, const int32_t *num_cached, const int32_t *tables,
                               int64_t table_stride, int max_keys, int num_threads);

/* decode_pairs.c: one row of a bf16 cache on bf16 products (AVX512-BF16), for the head dims where
 * bs_decode_pairs_takes; q: heads x dim bf16 of scratch, scores: heads rows `stride` floats apart */
int bs_decode_pairs_takes(int dim);
void bs_decode_row_pairs(const Args *a, const int32_t *table, int64_t row, int64_t pos, uint16_t *q, float *scores,
                         int64_t stride);

/* decoder_layer.c: one layer on the residual rows x [rows, hidden], in place; with `keep` (NULL: every
 * row), only rows keep[0..kept) past attention, into x's first kept rows; 0, or a kernel's status. */
int bs_decoder_layer(const LayerDesc *l, const StepDesc *s, float *x, void *k_cache, void *v_cache,
                     const int64_t *keep, int64_t kept);

#endif
