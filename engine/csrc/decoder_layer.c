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
 */
#include <stddef.h>

#include "batchscope.h"

static int linear(const LayerDesc *l, const LinearDesc *w, const float *x, float *out, const StepDesc *s) {
    switch (l->kernel) {
    case LINEAR_AMX: return bs_linear_amx(x, w->in, w->weight, w->bias, out, s->rows, w->out, w->in, s->threads);
    case LINEAR_PAIRS: return bs_linear_bf16_pairs(x, w->in, w->weight, w->bias, out, s->rows, w->out, w->in, s->threads);
    default:
        bs_linear(x, w->in, w->weight, l->kernel == LINEAR_WIDEN, w->bias, out, s->rows, w->out, w->in, s->threads);
        return 0;
    }
}

static void add(float *x, const float *delta, int64_t count) {
    for (int64_t i = 0; i < count; i++) x[i] += delta[i];
}

/* One layer on the residual rows x [rows, hidden] (updated in place); 0, or a kernel's status. */
int bs_decoder_layer(const LayerDesc *l, const StepDesc *s, float *x, void *k_cache, void *v_cache) {
    const int64_t hidden = l->o.out, q_size = (int64_t)l->heads * l->dim, kv_size = (int64_t)l->kv_heads * l->dim;
    const int64_t stride = l->qkv.out, rows = s->rows;
    int status;
    bs_add_rms_norm(x, NULL, l->norm1, s->h, rows, hidden, l->eps, s->threads);
    if ((status = linear(l, &l->qkv, s->h, s->qkv, s))) return status;
    bs_rotary(s->qkv, stride, rows, l->heads + l->kv_heads, l->dim, s->cos, s->sin, s->threads);
    status = bs_paged_attention(s->qkv + q_size, stride, s->qkv + q_size + kv_size, stride, s->slots, rows, s->qkv,
                                stride, s->attn, k_cache, v_cache, s->bf16_cache, s->row_start, s->row_count,
                                s->num_cached, s->tables, s->table_stride, s->segments, l->heads, l->kv_heads, l->dim,
                                s->block_size, s->scale, s->max_keys, s->invariant, s->threads);
    if (status || (status = linear(l, &l->o, s->attn, s->delta, s))) return status;
    bs_add_rms_norm(x, s->delta, l->norm2, s->h, rows, hidden, l->eps, s->threads);
    if ((status = linear(l, &l->gate_up, s->h, s->gate_up, s))) return status;
    bs_silu_mul(s->gate_up, s->act, rows, l->gate_up.out / 2, s->threads);
    if ((status = linear(l, &l->down, s->act, s->delta, s))) return status;
    add(x, s->delta, rows * hidden);
    return 0;
}
