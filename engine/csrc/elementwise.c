/* Fused element-wise steps of a decoder layer on the CPU, computed in fp32, one pass over each row:
 * RMSNorm (optionally after adding a residual branch) and SiLU(gate) * up, written in fp32 or bf16
 * (store_out). In torch each is 3 to 8 separate ops per layer, each one a dispatch and a pass over
 * memory; at decode sizes the dispatch is most of their cost. A row's result never depends on the
 * other rows; rows are split over the threads. Sizes must be multiples of 16 (the Python side checks).
 */
#include <math.h>

#include "batchscope.h"
#include "vec.h"

/* 16 results at element i of an output: fp32, or (bf16) rounded to bf16 as the bf16 linears round their
 * input (gemm_bf16.c), for a fused layer whose next linear takes them so (decoder_layer.c). */
static inline void store_out(void *out, int bf16, int64_t i, vf v) {
    if (bf16)
        store_bf16_exact((uint16_t *)out + i, v);
    else
        store((float *)out + i, v);
}

/* x += delta (when delta is not NULL), then out = weight * (x * (1 / sqrt(mean(x^2) + eps))).
 * The sum of squares runs in 16 lanes, then the lanes are added in a fixed tree. */
void bs_add_rms_norm(float *x, const float *delta, const float *weight, void *out, int bf16, int64_t rows,
                     int64_t hidden, float eps, int num_threads) {
#pragma omp parallel for num_threads(num_threads) schedule(static) if (rows * hidden > BS_THREADED_ELEMENTS)
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * hidden;
        vf squares = {0};
        for (int64_t i = 0; i < hidden; i += LANES) {
            vf v = load(xr + i);
            if (delta) {
                v += load(delta + r * hidden + i);
                store(xr + i, v);
            }
            squares += v * v;
        }
        float scale = 1.0f / sqrtf(hsum(squares) / (float)hidden + eps);
        for (int64_t i = 0; i < hidden; i += LANES)
            store_out(out, bf16, r * hidden + i, load(weight + i) * (load(xr + i) * scale));
    }
}

/* out[r] = silu(gate_up[r, :inter]) * gate_up[r, inter:], silu(g) = g / (1 + exp(-g)). */
void bs_silu_mul(const float *gate_up, void *out, int bf16, int64_t rows, int64_t inter, int num_threads) {
#pragma omp parallel for num_threads(num_threads) schedule(static) if (rows * inter > BS_THREADED_ELEMENTS)
    for (int64_t r = 0; r < rows; r++) {
        const float *gate = gate_up + r * 2 * inter, *up = gate + inter;
        for (int64_t i = 0; i < inter; i += LANES) {
            vf g = load(gate + i);
            store_out(out, bf16, r * inter + i, g / (1.0f + vexp(-g)) * load(up + i));
        }
    }
}

/* Rotary embedding in place on `heads` head vectors of each row (q's and k's side by side in the
 * fused projection, rows row_stride floats apart): x * cos + rotate_half(x) * sin, with sin given
 * with its first half negated (models/llama.py, signed_sin) and both [rows, dim]. Two products
 * and a sum, each rounded (no fused multiply-add): the same bits as torch's three ops. */
__attribute__((optimize("fp-contract=off")))
void bs_rotary(float *qk, int64_t row_stride, int64_t rows, int heads, int dim, const float *cos, const float *sin,
               int num_threads) {
    const int half = dim / 2;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (rows * heads * dim > BS_THREADED_ELEMENTS)
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cos + r * dim, *s = sin + r * dim;
        for (int h = 0; h < heads; h++) {
            float *x = qk + r * row_stride + (int64_t)h * dim;
            for (int i = 0; i < half; i += LANES) {
                vf lo = load(x + i), hi = load(x + half + i);
                vf a = lo * load(c + i), b = hi * load(s + i);
                vf d = hi * load(c + half + i), e = lo * load(s + half + i);
                store(x + i, a + b), store(x + half + i, d + e);
            }
        }
    }
}
