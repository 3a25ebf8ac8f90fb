/* Top-p (nucleus) sampling's threshold on the CPU, without sorting the vocabulary.
 *
 * A token stays in a row's nucleus when the probability mass of the tokens strictly more likely
 * than it is below top_p (so tokens of equal probability stay or go together). That set is every
 * token of probability >= theta, and theta is all the sampler needs. Sorting the whole row, as
 * torch's sort does it, took ~1.7 ms a row of SmolLM2's 49,152 tokens (39 ms a 16-row step: three
 * times the step's forward pass). But a token of the nucleus has more than 1 - top_p of mass at or
 * below it, spread over at most `vocab` tokens, so its probability is above (1 - top_p) / vocab:
 * only the tokens above half that floor are copied out (SmolLM2's own logits: ~100 at temperature
 * 0.7, hundreds to thousands at 1.0, ~30,000 after a prompt of random tokens) and sorted by their
 * bits. Where their mass does not reach top_p (the floor assumed the row sums to 1), every token of
 * positive probability is sorted instead: the same threshold, slower.
 *
 * theta is the last probability, in descending order, with less than top_p before it: a tie at
 * the edge has the same value, so it stays whole. The masses are added in fp64 in descending order,
 * the same additions as an exclusive fp64 cumulative sum over the row sorted descending (the
 * sampler's torch reference), so both give the same theta. Rows are split over the threads.
 */
#include <stdint.h>
#include <stdlib.h>

#include "batchscope.h"
#include "vec.h"

/* kept[0..n) (positive floats) in ascending order, by their bits (positive floats order as their bit
 * patterns do): three passes of 11 bits between kept and `spare`; returns where the sorted values
 * are (spare: an odd number of passes). A qsort of a flat row's ~30,000 candidates (a prompt of
 * random tokens at temperature 1) took ~2.7 ms; this whole kernel takes 0.23-0.29 ms a row at
 * 16,000-49,000. */
static const float *sort_ascending(float *kept, float *spare, int64_t n) {
    uint32_t *from = (uint32_t *)kept, *to = (uint32_t *)spare;
    for (int shift = 0; shift < 33; shift += 11) {
        int64_t start[2049] = {0};
        for (int64_t i = 0; i < n; i++) start[((from[i] >> shift) & 2047) + 1]++;
        for (int b = 0; b < 2048; b++) start[b + 1] += start[b];
        for (int64_t i = 0; i < n; i++) to[start[(from[i] >> shift) & 2047]++] = from[i];
        uint32_t *t = from; from = to, to = t;
    }
    return (const float *)from;
}

/* theta among the row's probabilities above `floor`: 1 where they hold the cut (their mass reaches
 * top_p, so every token below the floor has at least top_p above it and goes), else 0. */
static int cut_above(const float *p, int64_t vocab, double top_p, float floor, float *kept, float *spare,
                     float *theta) {
    int64_t n = 0;
    for (int64_t i = 0; i < vocab; i++)
        if (p[i] > floor) kept[n++] = p[i];
    const float *sorted = sort_ascending(kept, spare, n);
    double before = 0;  /* the mass before sorted[j] in descending order */
    for (int64_t j = n - 1; j >= 0; before += sorted[j--]) {
        if (before >= top_p) return 1;
        *theta = sorted[j];
    }
    return before >= top_p;
}

/* theta[r] for each row of probs [rows, vocab] (contiguous) and its top_p in (0, 1); 0 (every token
 * stays) for a row with no positive probability; -2 out of memory. */
int bs_nucleus_thresholds(const float *probs, int64_t rows, int64_t vocab, const double *top_p, float *theta,
                          int num_threads) {
    int failed = 0;
#pragma omp parallel num_threads(num_threads) if (rows > 1)
    {
        float *kept = malloc(sizeof(float) * 2 * (vocab + 1)), *spare = kept + vocab + 1;
        if (!kept) flag_failure(&failed);
#pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < rows; r++) {
            if (!kept) continue;
            const float *p = probs + r * vocab;
            theta[r] = 0;
            if (!cut_above(p, vocab, top_p[r], (float)((1 - top_p[r]) / 2 / vocab), kept, spare, &theta[r]))
                cut_above(p, vocab, top_p[r], 0, kept, spare, &theta[r]);
        }
        free(kept);
    }
    return failed ? -2 : 0;
}
