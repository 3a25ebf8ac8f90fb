"""Figures of one run: throughput, TTFT and inter-token latency percentiles, and the
fraction of the machine's ceiling that Batchscope's steps reach."""
from __future__ import annotations

import statistics

import numpy as np

from .timings import RunResult, StepStat
from .workloads import Workload


def percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 2) if values else None


def summarise(workload: Workload, run: RunResult) -> dict:
    """Throughput over the serving window (first arrival to last token) and latencies in ms.

    ITL is measured on the requests present from the start (in W2: the steady decoders), as
    gaps between consecutive tokens of a request, i.e. only while it was already decoding.
    """
    reqs = run.requests
    for spec, timing in zip(workload.requests, reqs):
        if len(timing.token_times) != spec.max_tokens:
            raise RuntimeError(f"a request produced {len(timing.token_times)} of {spec.max_tokens} tokens")
    window = max(t.token_times[-1] for t in reqs) - min(t.submit for t in reqs)
    out_tokens = sum(len(t.token_times) for t in reqs)
    ttft = [(t.token_times[0] - t.submit) * 1e3 for t in reqs]
    itl = [
        (b - a) * 1e3
        for spec, t in zip(workload.requests, reqs) if spec.after_tokens == 0
        for a, b in zip(t.token_times, t.token_times[1:])
    ]
    late = [x for spec, x in zip(workload.requests, ttft) if spec.after_tokens > 0]
    return {
        "wall_s": round(window, 3),
        "output_tok_s": round(out_tokens / window, 2),
        "total_tok_s": round((out_tokens + workload.num_prompt_tokens) / window, 2),
        "ttft_ms_mean": _mean(ttft),
        "ttft_ms_p50": percentile(ttft, 50),
        "ttft_ms_p99": percentile(ttft, 99),
        "itl_ms_p50": percentile(itl, 50),
        "itl_ms_p99": percentile(itl, 99),
        "itl_ms_max": round(max(itl), 2) if itl else None,
        "late_ttft_ms": _mean(late),
    }


def _prefill_heavy(steps: list[StepStat], min_prefill_rows: int) -> list[StepStat]:
    return [s for s in steps if s.num_rows - s.num_decode_rows >= min_prefill_rows]


def _flop_rate(s: StepStat) -> float:
    """The step's useful FLOPs per second of its forward phase."""
    return s.flops / (s.forward_ms / 1e3)


def flops_ceiling(steps: list[StepStat], probe_peak: float, min_prefill_rows: int) -> float:
    """The GEMM peak the rooflines take: the probe's (torch's best matmul at the run's start and end),
    or the run's fastest prefill-heavy step (its forward phase) where that was faster. On a shared host
    the probe can fall in a slow minute, and the engine's own kernels may outrun torch's matmul; a
    ceiling below what a step reached would put the "at most" bounds below the measured ratios."""
    return max([probe_peak, *map(_flop_rate, _prefill_heavy(steps, min_prefill_rows))])


def prefill_efficiency(steps: list[StepStat], peak_flops: float, min_prefill_rows: int, threads: int) -> dict:
    """Achieved FLOP/s of prefill-heavy steps (>= ``min_prefill_rows`` prompt rows) as a
    fraction of the GEMM peak, over the forward phase and over the whole step; and over the
    step's CPU time per thread, which on a shared machine leaves out time the step spent
    descheduled (the GEMM peak is a best-of, taken when the cores were free)."""
    heavy = _prefill_heavy(steps, min_prefill_rows)
    if not heavy:
        return {"num_steps": 0}
    forward = [_flop_rate(s) / peak_flops for s in heavy]
    total = [s.flops / (s.total_ms / 1e3) / peak_flops for s in heavy]
    cpu = [s.flops / (s.cpu_ms / 1e3 / threads) / peak_flops for s in heavy if s.cpu_ms > 0]
    return {
        "cpu_fraction_median": round(statistics.median(cpu), 3) if cpu else None,
        "num_steps": len(heavy),
        "rows_median": statistics.median(s.num_rows for s in heavy),
        "forward_fraction_median": round(statistics.median(forward), 3),
        "forward_fraction_max": round(max(forward), 3),
        "step_fraction_median": round(statistics.median(total), 3),
        "gflop_s_median": round(statistics.median(map(_flop_rate, heavy)) / 1e9, 1),
    }


def _decode_only(s: StepStat) -> bool:
    return s.num_rows == s.num_decode_rows and s.num_rows > 0


def _floor_ms(s: StepStat, weight_bytes: float, bandwidth: float) -> float:
    """The step's bytes (every weight, its keys and values) read once at the bandwidth."""
    return (weight_bytes + s.kv_bytes) / bandwidth * 1e3


def _roofline_ms(s: StepStat, weight_bytes: float, bandwidth: float, peak_flops: float) -> float:
    """The longer of the step's useful FLOPs at the GEMM peak and its bytes at the bandwidth."""
    return max(s.flops / peak_flops * 1e3, _floor_ms(s, weight_bytes, bandwidth))


def decode_efficiency(steps: list[StepStat], weight_bytes: float, bandwidth: float, peak_flops: float) -> dict:
    """Decode-only steps against the memory-bandwidth floor: every weight and every key/value
    read once at the measured bandwidth. Fraction = floor time / step time. Where a step's
    arithmetic at the GEMM peak outlasts its floor, no kernel reaches the floor on this host:
    ``attainable_fraction_median`` is the fraction a step at its roofline would read."""
    decode = [s for s in steps if _decode_only(s)]
    if not decode:
        return {"num_steps": 0}
    floor_ms = [_floor_ms(s, weight_bytes, bandwidth) for s in decode]
    roof_ms = [_roofline_ms(s, weight_bytes, bandwidth, peak_flops) for s in decode]
    return {
        "num_steps": len(decode),
        "batch_median": statistics.median(s.num_rows for s in decode),
        "floor_ms_median": round(statistics.median(floor_ms), 3),
        "roofline_ms_median": round(statistics.median(roof_ms), 3),
        "forward_ms_median": round(statistics.median(s.forward_ms for s in decode), 3),
        "forward_fraction_median": round(statistics.median(f / s.forward_ms for f, s in zip(floor_ms, decode)), 3),
        "step_fraction_median": round(statistics.median(f / s.total_ms for f, s in zip(floor_ms, decode)), 3),
        "attainable_fraction_median": round(statistics.median(f / r for f, r in zip(floor_ms, roof_ms)), 3),
    }


def run_ceilings(steps: list[StepStat], weight_bytes: float, bandwidth: float, peak_flops: float) -> dict:
    """What the targets on steps are worth: the run's time (its steps' wall time) as a fraction of
    itself if each decode-only step took only its roofline, the longer of its useful FLOPs at the
    GEMM peak and its bytes (weights, keys and values) at the measured bandwidth, the other steps as
    measured (``decode_at_roofline``); and if every step did (``all_at_roofline``)."""
    if not steps:
        return {}
    roof = [_roofline_ms(s, weight_bytes, bandwidth, peak_flops) for s in steps]
    run_ms = sum(s.wall_ms for s in steps)
    decode_ms = sum(s.wall_ms for s in steps if _decode_only(s))
    decode_roof_ms = sum(r for r, s in zip(roof, steps) if _decode_only(s))
    return {
        "decode_share": round(decode_ms / run_ms, 3),
        "decode_at_roofline": round((run_ms - decode_ms + decode_roof_ms) / run_ms, 3),
        "all_at_roofline": round(sum(roof) / run_ms, 3),
    }


def step_overhead(steps: list[StepStat]) -> dict:
    """Per-step time outside the engine's named phases (record building, timer), in ms."""
    if not steps:
        return {}
    return {
        "wall_ms_mean": round(statistics.fmean(s.wall_ms for s in steps), 3),
        "unphased_ms_mean": round(statistics.fmean(s.wall_ms - s.phases_ms for s in steps), 3),
        "unphased_fraction": round(sum(s.wall_ms - s.phases_ms for s in steps) / sum(s.wall_ms for s in steps), 4),
    }
