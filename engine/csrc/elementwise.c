/* Fused element-wise steps of a decoder layer on the CPU, in fp32, one pass over each row:
 * RMSNorm (optionally after adding a residual branch) and SiLU(gate) * up. In torch each is
 * 3 to 8 separate ops per layer, each one a dispatch and a pass over memory; at decode sizes the
 * dispatch is most of their cost. A row's result never depends on the other rows; rows are split
 * over the threads. Sizes must be multiples of 16 (the Python side checks).
 */
#include <math.h>

#include "vec.h"

/* x += delta (when delta is not NULL), then out = weight * (x * (1 / sqrt(mean(x^2) + eps))).
 * The sum of squares runs in 16 lanes, then the lanes are added in a fixed tree. */
void bs_add_rms_norm(float *x, const float *delta, const float *weight, float *out, int64_t rows, int64_t hidden,
                     float eps, int num_threads) {
#pragma omp parallel for num_threads(num_threads) schedule(static) if (rows * hidden > 65536)
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * hidden, *orow = out + r * hidden;
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
        for (int64_t i = 0; i < hidden; i += LANES) store(orow + i, load(weight + i) * (load(xr + i) * scale));
    }
}

/* out[r] = silu(gate_up[r, :inter]) * gate_up[r, inter:], silu(g) = g / (1 + exp(-g)). */
void bs_silu_mul(const float *gate_up, float *out, int64_t rows, int64_t inter, int num_threads) {
#pragma omp parallel for num_threads(num_threads) schedule(static) if (rows * inter > 65536)
    for (int64_t r = 0; r < rows; r++) {
        const float *gate = gate_up + r * 2 * inter, *up = gate + inter;
        float *orow = out + r * inter;
        for (int64_t i = 0; i < inter; i += LANES) {
            vf g = load(gate + i);
            store(orow + i, g / (1.0f + vexp(-g)) * load(up + i));
        }
    }
}
