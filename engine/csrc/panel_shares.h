/* A linear's panels handed out to its threads (gemm.c, gemm_bf16.c).
 *
 * Each thread starts on its own share of consecutive panels (thread t of T: panels t P/T ..
 * (t+1) P/T) and streams it front to back, so its weight stream is one run and the next panel its
 * last pass prefetches is its own. A thread that runs out takes the back half of the largest share
 * still open and streams that: the two threads of a 2-vCPU host run at different speeds from moment
 * to moment (the other guests, the API server's event loop beside the engine), and the faster one
 * takes over the slower one's last panels instead of waiting at the barrier. When they keep pace,
 * nobody's stream is broken.
 *
 * OpenMP's guided hand-out (before) did that only in part: its first run is half of all panels, and
 * the thread that took it is never helped. Clocks at each thread's end of a bf16 linear (W1 at
 * SmolLM2-135M, 2 threads, an instrumented copy): the threads' idle time at the linears' barrier
 * fell from 4.2-5.1% of their time in decode-only steps to 1.3-1.8%, from 1.4-2.2% to 0.9-1.5% in
 * prefill-heavy ones. W1 step by step against guided (benchmarks.lockstep, 3 rounds), all steps:
 * 135M bf16 0.989x and 0.991x (5 rounds) the time, fp32 0.995x, the 0.5B shape 0.998x (bf16) and
 * 0.995x (fp32) alone; beside a neighbour busy 0.5 ms of every 2.5, 135M bf16 0.967x, fp32 0.962x,
 * 0.5B bf16 0.956x; busy 5 ms of every 25, 135M bf16 0.973x.
 *
 * A share is one 64-bit word, next panel and end, changed by compare-and-swap: the owner moves next
 * on, a thief moves end back. The owner takes a quarter of what is left at a time (one swap for a
 * run of panels: a swap a panel, whose lock stalls the thread's loads, read 1.019x the time in
 * decode-only steps; half at a time kept too much from a thread that runs out, 0.999x). Each share
 * has its own cache line, so the owner's swaps stay in its own cache until somebody steals. */
#ifndef BATCHSCOPE_PANEL_SHARES_H
#define BATCHSCOPE_PANEL_SHARES_H
#include <stdatomic.h>
#include <stdint.h>

#define BS_MAX_SHARES 64  /* threads a linear uses at most */

typedef struct {
    _Alignas(64) _Atomic uint64_t range;  /* end << 32 | next */
} PanelShare;

static inline uint64_t share_range(uint32_t next, uint32_t end) { return (uint64_t)end << 32 | next; }
static inline uint32_t share_next(uint64_t range) { return (uint32_t)range; }
static inline uint32_t share_end(uint64_t range) { return (uint32_t)(range >> 32); }

/* The first shares of `panels` panels, for as many threads as asked (at most BS_MAX_SHARES): how many.
 * Before the parallel region (a thief may read any share); a team smaller than that leaves shares
 * nobody owns, which the others take over. */
static inline int share_panels(PanelShare *shares, int threads, int64_t panels) {
    threads = threads < 1 ? 1 : threads < BS_MAX_SHARES ? threads : BS_MAX_SHARES;
    for (int t = 0; t < threads; t++)
        atomic_init(&shares[t].range, share_range((uint32_t)(t * panels / threads), (uint32_t)((t + 1) * panels / threads)));
    return threads;
}

/* The back half (at least one panel) of the largest share other than `thief`'s, made the thief's own;
 * 0 when every share is empty. */
static inline int steal_panels(PanelShare *shares, int threads, int thief) {
    for (;;) {
        int victim = -1;
        uint64_t seen = 0;
        uint32_t most = 0;
        for (int t = 0; t < threads; t++) {
            uint64_t range = atomic_load_explicit(&shares[t].range, memory_order_relaxed);
            uint32_t left = share_end(range) - share_next(range);
            if (t != thief && left > most) victim = t, seen = range, most = left;
        }
        if (victim < 0) return 0;
        uint32_t from = share_end(seen) - (most > 1 ? most / 2 : 1);
        if (atomic_compare_exchange_weak(&shares[victim].range, &seen, share_range(share_next(seen), from))) {
            atomic_store_explicit(&shares[thief].range, share_range(from, share_end(seen)), memory_order_relaxed);
            return 1;
        }
    }
}

/* Thread t's next run of panels [*first, *last) from its share (a quarter of what is left there, at
 * least one panel: one swap a run, not one a panel, as a locked swap stalls the thread's loads);
 * 0 when none is left. *until is the end of the share it came from, as the thread saw it. */
static inline int take_run(PanelShare *shares, int threads, int t, int64_t *first, int64_t *last, int64_t *until) {
    for (;;) {
        uint64_t range = atomic_load_explicit(&shares[t].range, memory_order_relaxed);
        uint32_t next = share_next(range), end = share_end(range), run = (end - next + 3) / 4;
        if (next < end) {
            if (atomic_compare_exchange_weak(&shares[t].range, &range, share_range(next + run, end)))
                return *first = next, *last = next + run, *until = end, 1;
        } else if (!steal_panels(shares, threads, t)) {
            return 0;
        }
    }
}

#endif
