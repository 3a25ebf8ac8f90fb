/* Vector helpers shared by the CPU kernels: GCC vector extensions, a fixed-order horizontal sum, and
 * exp as a polynomial (Cephes' expf, within 2 ulp) so loops over it vectorise without -ffast-math.
 *
 * A vector is one register of the CPU: 16 floats with AVX-512, 8 with AVX2 and FMA (most laptops:
 * Intel's consumer CPUs, AMD's before Zen 4). GCC keeps a vector wider than the CPU's registers in
 * memory, a store and a reload per operation (the kernels ran 17x slower than torch's ops on a
 * Zen 3 when they were 16 floats everywhere), so the width follows the CPU. Results differ between
 * the two widths only where lanes are summed (hsum, reduce_lanes: attention's dot products and
 * norms); within one build a row's result never depends on the other rows. Other CPUs get 16-float
 * vectors, which cpu_kernels.py leaves unused (unfit). */
#ifndef BATCHSCOPE_VEC_H
#define BATCHSCOPE_VEC_H
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define LANES 8
#else
#define LANES 16
#endif

typedef float vf __attribute__((vector_size(LANES * 4)));
typedef float vf_u __attribute__((vector_size(LANES * 4), aligned(4), may_alias));
typedef uint32_t vu __attribute__((vector_size(LANES * 4)));
typedef uint32_t vu_u __attribute__((vector_size(LANES * 4), aligned(2), may_alias));
typedef int32_t vi __attribute__((vector_size(LANES * 4)));
typedef uint16_t vh_u __attribute__((vector_size(LANES * 2), aligned(2), may_alias));

static inline vf load(const float *p) { return *(const vf_u *)p; }

#if defined(__AVX512F__)
#include <immintrin.h>
/* One widening move and a shift (GCC splits the generic conversion into halves and shuffles). */
static inline vf load_bf16(const uint16_t *p) {
    return (vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16);
}
/* a * b + c rounded once, as written: GCC contracts `x * y + z` into an FMA on its own, but which of
 * two products it fuses is its choice, and the choice changes the bits. */
static inline vf fmadd(vf a, vf b, vf c) { return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#elif LANES == 8
#include <immintrin.h>
static inline vf load_bf16(const uint16_t *p) {
    return (vf)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16);
}
static inline vf fmadd(vf a, vf b, vf c) { return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#else
static inline vf fmadd(vf a, vf b, vf c) { return a * b + c; }
static inline vf load_bf16(const uint16_t *p) {
    vu bits = __builtin_convertvector(*(const vh_u *)p, vu) << 16;
    vf out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
#endif

#if defined(__AVX512F__) || LANES == 8
/* v kept in a register: GCC folds a loaded vector into each multiply-add that uses it, a load per use. */
static inline vf in_register(vf v) {
    __asm__("" : "+v"(v));
    return v;
}
#else
static inline vf in_register(vf v) { return v; }  /* (no register holds 16 floats here) */
#endif

/* A failure flag the threads of one OpenMP region share: set and read atomically. */
static inline void flag_failure(int *failed) {
#pragma omp atomic write
    *failed = 1;
}

static inline int has_failed(int *failed) {
    int seen;
#pragma omp atomic read
    seen = *failed;
    return seen;
}

/* A lane permutation of two vf: lane k of the result is lane mask[k] of the 32 lanes (a, b).
 * GCC's __builtin_shuffle exists since GCC 4.7 (__builtin_shufflevector only since GCC 12, which
 * Ubuntu 22.04's GCC 11 lacks); clang has only __builtin_shufflevector. */
#if defined(__clang__)
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (vi){__VA_ARGS__})
#endif

/* The sum of the lanes as a fixed tree (halves added, then their halves...). */
#if LANES == 16
static inline float hsum(vf v) {
    vf a = v + SHUFFLE(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    vf b = a + SHUFFLE(a, a, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
}
#else
static inline float hsum(vf v) {
    vf b = v + SHUFFLE(v, v, 4, 5, 6, 7, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
}
#endif

static inline vf vmaxf(vf a, vf b) {
    vi take_a = a > b;
    return (vf)(((vi)a & take_a) | ((vi)b & ~take_a));
}

static inline void store(float *p, vf v) { memcpy(p, &v, sizeof v); }

#if defined(__AVX512BF16__)
/* 16 floats to bf16, to nearest even, with the CPU's conversion instruction. */
static inline void store_bf16(uint16_t *dst, vf v) {
    _mm256_storeu_si256((__m256i *)dst, (__m256i)_mm512_cvtneps_pbh((__m512)v));
}
#endif

/* fp32 to bf16 bits, to nearest even (NaN stays NaN). */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* 16 floats to bf16 bits at dst, lane by lane as to_bf16 (the same bits, NaN and denormals included). */
static inline void store_bf16_exact(uint16_t *dst, vf v) {
    vu u;
    memcpy(&u, &v, sizeof u);
    vu rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);
    *(vh_u *)dst = __builtin_convertvector((rounded & ~nan) | (0x7fc0u & nan), vh_u);
}

/* Lane k of the result is the sum of the lanes of d[k]: a transpose-and-add tree, 45 vector
 * operations for 16 dot products instead of 16 horizontal sums (21 for 8 on 8 lanes). */
#if LANES == 16
static inline vf reduce_lanes(const vf *d) {
    vf r[8], s[4], t[2];
    for (int i = 0; i < 8; i++)
        r[i] = SHUFFLE(d[2 * i], d[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
             + SHUFFLE(d[2 * i], d[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    for (int i = 0; i < 4; i++)
        s[i] = SHUFFLE(r[2 * i], r[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
             + SHUFFLE(r[2 * i], r[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    for (int i = 0; i < 2; i++)
        t[i] = SHUFFLE(s[2 * i], s[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29)
             + SHUFFLE(s[2 * i], s[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    return SHUFFLE(t[0], t[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
         + SHUFFLE(t[0], t[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

/* A 16 x 16 matrix of 32-bit lanes, one row a vector, transposed in place: four rounds that swap the
 * off-diagonal d x d blocks of rows i and i + d (d = 8, 4, 2, 1; i without bit d), each row a
 * two-source permute of the two (lanes 0-15 from row i, 16-31 from row i + d). On 8 lanes, 8 x 8 in
 * three rounds (d = 4, 2, 1). */
static inline void transpose_lanes(vf r[16]) {
    for (int i = 0; i < 16; i++)
        if (!(i & 8)) {
            const vf a = r[i], b = r[i + 8];
            r[i] = SHUFFLE(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
            r[i + 8] = SHUFFLE(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
        }
    for (int i = 0; i < 16; i++)
        if (!(i & 4)) {
            const vf a = r[i], b = r[i + 4];
            r[i] = SHUFFLE(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
            r[i + 4] = SHUFFLE(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
        }
    for (int i = 0; i < 16; i++)
        if (!(i & 2)) {
            const vf a = r[i], b = r[i + 2];
            r[i] = SHUFFLE(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
            r[i + 2] = SHUFFLE(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
        }
    for (int i = 0; i < 16; i += 2) {
        const vf a = r[i], b = r[i + 1];
        r[i] = SHUFFLE(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
        r[i + 1] = SHUFFLE(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    }
}
#else
static inline vf reduce_lanes(const vf *d) {
    vf r[4], s[2];
    for (int i = 0; i < 4; i++)
        r[i] = SHUFFLE(d[2 * i], d[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11) + SHUFFLE(d[2 * i], d[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15);
    for (int i = 0; i < 2; i++)
        s[i] = SHUFFLE(r[2 * i], r[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13) + SHUFFLE(r[2 * i], r[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15);
    return SHUFFLE(s[0], s[1], 0, 2, 4, 6, 8, 10, 12, 14) + SHUFFLE(s[0], s[1], 1, 3, 5, 7, 9, 11, 13, 15);
}

static inline void transpose_lanes(vf r[8]) {
    for (int i = 0; i < 8; i++)
        if (!(i & 4)) {
            const vf a = r[i], b = r[i + 4];
            r[i] = SHUFFLE(a, b, 0, 1, 2, 3, 8, 9, 10, 11);
            r[i + 4] = SHUFFLE(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
        }
    for (int i = 0; i < 8; i++)
        if (!(i & 2)) {
            const vf a = r[i], b = r[i + 2];
            r[i] = SHUFFLE(a, b, 0, 1, 8, 9, 4, 5, 12, 13);
            r[i + 2] = SHUFFLE(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
        }
    for (int i = 0; i < 8; i += 2) {
        const vf a = r[i], b = r[i + 1];
        r[i] = SHUFFLE(a, b, 0, 8, 2, 10, 4, 12, 6, 14);
        r[i + 1] = SHUFFLE(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
    }
}
#endif

static inline vf vselect(vi mask, vf a, vf b) {
    return (vf)(((vi)a & mask) | ((vi)b & ~mask));
}

/* Cephes expf's split of ln 2 (x = n ln2 + r) and its polynomial for exp(r) - 1 - r, highest term
 * first (exp_in_range and exp_of_weight). */
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

/* exp(x) of x in [-87.3, 88.3], Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, n = x / ln2 rounded half
 * away from zero by adding `half` (0.5 with x's sign; at x = 0 either sign gives 0) and truncating. */
static inline vf exp_in_range(vf x, vf half) {
    vf n = __builtin_convertvector(__builtin_convertvector(x * 1.44269504088896341f + half, vi), vf);
    vf r = x - n * EXP_LN2_HI - n * EXP_LN2_LO;
    vf p = EXP_P0 * r + EXP_P1;
    p = p * r + EXP_P2;
    p = p * r + EXP_P3;
    p = p * r + EXP_P4;
    p = p * r + EXP_P5;
    p = p * r * r + r + 1.0f;
    vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    vf scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

/* exp(x): 0 below -87.3 (where the padding past the last key lies), x clamped to 88.3 above. */
static inline vf vexp(vf x) {
    const vf zero = {0};
    vi keep = x >= -87.3f;
    x = vselect(keep, x, zero);
    x = vselect(x > 88.3f, zero + 88.3f, x);
    return vselect(keep, exp_in_range(x, vselect(x < 0.0f, zero - 0.5f, zero + 0.5f)), zero);
}

/* vexp(x) of x <= 0 (a score minus the scores' max), the same bits without the clamp above and the
 * sign's select: at x = 0 adding -0.5 truncates to the same n, 0. Softmax weights take ~15% of a
 * chunk's attention; these two selects and compares were a fifth of their instructions. */
static inline vf vexp_nonpositive(vf x) {
    const vf zero = {0};
    vi keep = x >= -87.3f;
    return vselect(keep, exp_in_range(x, zero - 0.5f), zero);  /* lanes below -87.3 (or NaN) dropped */
}

#if defined(__AVX512BF16__)
/* The bf16 pair at `at` (a query's dims 2p, 2p + 1; two keys' weights), in every 32-bit lane. */
static inline __m512bh pair_of(const uint16_t *at) {
    uint32_t pair;
    memcpy(&pair, at, sizeof pair);
    return (__m512bh)_mm512_set1_epi32((int)pair);
}

/* exp(x) for x <= 0, as vexp (Cephes' range reduction and polynomial) but on AVX-512's own
 * rounding and scaling (VRNDSCALEPS, VSCALEFPS) instead of its clamps and selects: half the
 * instructions, for weights that are rounded to bf16 next. Below -110 (the mask's -3.4e38 minus the
 * max) it clamps to -110, whose 2^-159 scale underflows to 0. */
static inline vf exp_of_weight(vf x) {
    const __m512 c = _mm512_max_ps((__m512)x, _mm512_set1_ps(-110.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), c);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(EXP_P0), r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return (vf)_mm512_scalef_ps(p, n);
}
#endif

#endif
