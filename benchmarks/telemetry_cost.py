"""What telemetry costs: W1 throughput with one subscriber that serialises every record
to JSON vs the bare step loop, alternated on one engine (same prompts, ABBA order so slow
drift of a shared machine cancels), plus the per-step time spent outside the engine's phases
(building the record) which the engine pays whether anyone listens or not.

Each round has its own prompts (seeded), and rounds differ in speed far more than the two
variants do, so the A/B cost is the median over rounds of the paired ratio subscribed / bare of
the same round, not a ratio of the two groups' medians. On a noisy 2-core machine even that
cannot resolve a few percent, so the cost is also measured directly: the time the engine spends
building records plus the subscriber's time, as a fraction of the step loop (``direct_cost``)."""
from __future__ import annotations

import json
import statistics
import time

from .metrics import step_overhead, summarise
from .peers import BATCHSCOPE_CONFIGS, BatchscopePeer, PeerContext
from .settings import Setting
from .workloads import WARMUP_SEED, build


class JsonSubscriber:
    """The cheapest real subscriber: each record to a JSON string, time spent noted."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, record) -> None:
        t = time.perf_counter()
        json.dumps(record.to_dict())
        self.seconds += time.perf_counter() - t
        self.calls += 1


def measure(ctx: PeerContext, setting: Setting, vocab_size: int) -> dict:
    # Prefix caching off: the same prompts can then be replayed without cache hits.
    peer = BatchscopePeer(ctx, **BATCHSCOPE_CONFIGS["bs_mixed_nocache"])
    peer.setup()
    peer.run(build("W1", setting, WARMUP_SEED, vocab_size))
    subscriber = JsonSubscriber()
    tok_s: dict[str, list[float]] = {"bare": [], "subscribed": []}
    steps = []
    for r in range(setting.telemetry_rounds):
        workload = build("W1", setting, 100 + r, vocab_size)
        order = ("bare", "subscribed") if r % 2 == 0 else ("subscribed", "bare")
        for variant in order:
            peer.subscriber = subscriber if variant == "subscribed" else None
            run = peer.run(workload)
            tok_s[variant].append(summarise(workload, run)["output_tok_s"])
            steps += run.steps
    bare, subscribed = statistics.median(tok_s["bare"]), statistics.median(tok_s["subscribed"])
    paired = [s / b for b, s in zip(tok_s["bare"], tok_s["subscribed"], strict=True)]
    overhead = step_overhead(steps)
    subscriber_ms = subscriber.seconds / max(subscriber.calls, 1) * 1e3
    direct = (overhead["unphased_ms_mean"] + subscriber_ms) / (overhead["wall_ms_mean"] + subscriber_ms)
    return {
        "output_tok_s": tok_s,
        "bare_median": bare,
        "subscribed_median": subscribed,
        "paired_ratios": [round(r, 4) for r in paired],
        "throughput_cost": round(1 - statistics.median(paired), 4),
        "subscriber_ms_per_step": round(subscriber_ms, 3),
        "engine_unphased": overhead,
        "direct_cost": round(direct, 4),
    }
