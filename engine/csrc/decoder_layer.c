/* A whole decoder layer in one call from Python: the same kernels, in the same order and with the
 * same arithmetic as models/llama.py runs them one by one (so the same bits), without the ~12
 * Python -> C transitions, tensor allocations and module calls of each layer. At decode sizes
 * those cost about as much as the layer's arithmetic (~130 us a layer, ~4 ms a step over 30
 * layers); the layer's data never leaves C.
 *
 *   h = norm1(x); qkv = h W_qkv^T (+b); rotary(q, k); attn = attention(q, k, v) (k, v into the
 *   cache first); x += attn W_o^T; h = norm2(x); a = silu(gate) * up of h W_gate_up^T; x += a W_down^T
 *
 * Weights are packed as the linear kernels take them (every output size a multiple of the
 * 32-column panel); the step's scratch rows are the caller's.
 *
 * On the bf16 pairs kernel the norms and SiLU write h and a in bf16, rounded as that kernel rounds its
 * input (the same bits), so that qkv, gate_up and down read half the bytes and skip their own
 * rounding pass and its barrier. W1 in bf16 step by step against the same build without it
 * (benchmarks.lockstep, 3 rounds): all steps 0.964x the time at 135M (prefill-heavy 0.960x,
 * decode-only 0.965x), 0.984x at the 0.5B shape. attn stays fp32: the attention kernels write it in
 * five places.
 */
#include <stddef.h>
#include <string.h>

#include "batchscope.h"

/* With `rounded`, x holds rows already in bf16 (the norms' and SiLU's output, for the bf16 pairs kernel). */
static int linear(const LayerDesc *l, const LinearDesc *w, const void *x, int rounded, float *out, int64_t rows,
                  int threads) {
    if (rounded) return bs_linear_bf16_rows(x, w->weight, w->bias, out, rows, w->out, w->in, threads);
    switch (l->kernel) {
    case LINEAR_AMX: return bs_linear_amx(x, w->in, w->weight, w->bias, out, rows, w->out, w->in, threads);
    case LINEAR_PAIRS: return bs_linear_bf16_pairs(x, w->in, w->weight, w->bias, out, rows, w->out, w->in, threads);
    default:
        bs_linear(x, w->in, w->weight, l->kernel == LINEAR_WIDEN, w->bias, out, rows, w->out, w->in, threads);
        return 0;
    }
}

/* x += delta, threaded as the element-wise kernels are (serial, it left the other thread
 * idle: W1's prefill-heavy steps 0.988x the time at 135M bf16, 0.994x fp32, 0.995x at the 0.5B shape,
 * benchmarks.lockstep). */
static void add(float *x, const float *delta, int64_t count, int num_threads) {
#pragma omp parallel for num_threads(num_threads) schedule(static) if (count > BS_THREADED_ELEMENTS)
    for (int64_t i = 0; i < count; i++) x[i] += delta[i];
}

/* Rows keep[0] < keep[1] < ... of rows [*, width] moved to rows 0, 1, ... (in place: keep[i] >= i). */
static void keep_rows(float *rows, int64_t width, const int64_t *keep, int64_t kept) {
    for (int64_t i = 0; i < kept; i++)
        if (keep[i] != i) memmove(rows + i * width, rows + keep[i] * width, sizeof(float) * width);
}

/* One layer on the residual rows x [rows, hidden] (updated in place); 0, or a kernel's status. With
 * `keep` (the last layer), every row's keys and values are written and attended as in any layer, then
 * only rows keep[0..kept) go on through the output projection and the MLP, into x's first kept rows:
 * the other rows' results would only feed logits nobody samples (a prompt's rows before its last).
 * Every kernel here computes a row from that row alone, so the kept rows are the same bits. */
int bs_decoder_layer(const LayerDesc *l, const StepDesc *s, float *x, void *k_cache, void *v_cache,
                     const int64_t *keep, int64_t kept) {
    const int64_t hidden = l->o.out, q_size = (int64_t)l->heads * l->dim, kv_size = (int64_t)l->kv_heads * l->dim;
    const int64_t stride = l->qkv.out;
    int64_t rows = s->rows;
    const int rounded = l->kernel == LINEAR_PAIRS;  /* h and act in bf16, rounded where they are computed */
    int status;
    bs_add_rms_norm(x, NULL, l->norm1, s->h, rounded, rows, hidden, l->eps, s->threads);
    if ((status = linear(l, &l->qkv, s->h, rounded, s->qkv, rows, s->threads))) return status;
    bs_rotary(s->qkv, stride, rows, l->heads + l->kv_heads, l->dim, s->cos, s->sin, s->threads);
    status = bs_paged_attention(s->qkv + q_size, stride, s->qkv + q_size + kv_size, stride, s->slots, rows, s->qkv,
                                stride, s->attn, k_cache, v_cache, s->bf16_cache, s->row_start, s->row_count,
                                s->num_cached, s->tables, s->table_stride, s->segments, l->heads, l->kv_heads, l->dim,
                                s->block_size, s->scale, s->max_keys, s->invariant, s->threads);
    if (status) return status;
    if (keep) {
        keep_rows(s->attn, q_size, keep, kept), keep_rows(x, hidden, keep, kept);
        if ((rows = kept) == 0) return 0;
    }
    if ((status = linear(l, &l->o, s->attn, 0, s->delta, rows, s->threads))) return status;
    bs_add_rms_norm(x, s->delta, l->norm2, s->h, rounded, rows, hidden, l->eps, s->threads);
    if ((status = linear(l, &l->gate_up, s->h, rounded, s->gate_up, rows, s->threads))) return status;
    bs_silu_mul(s->gate_up, s->act, rounded, rows, l->gate_up.out / 2, s->threads);
    if ((status = linear(l, &l->down, s->act, rounded, s->delta, rows, s->threads))) return status;
    add(x, s->delta, rows * hidden, s->threads);
    return 0;
}
