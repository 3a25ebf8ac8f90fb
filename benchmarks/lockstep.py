"""Two builds of the CPU kernels on one workload, step by step in one process:
``python -m benchmarks.lockstep --baseline REF`` (a git revision, or a directory of kernel sources).

Why: this project's machines share their cores with other guests, whose load moves absolute speed
by 10-25% from minute to minute, so two runs a minute apart (let alone two processes) cannot show
a 3% change. Here two engines with the same weights and configuration take the same requests,
and each step runs on one and then on the other, the order alternating from step to step, so both
builds see the same moments of the host. The ratio of their summed step times is taken per kind of
step (prefill-heavy: any prefill rows; decode-only), for the decode-only steps also per band of rows
(DECODE_BANDS, each with its share of their time), and per round; the rounds give its spread.
Two identical builds read 0.99-1.01.

The baseline's sources are compiled with this tree's compiler and flags. The weights are packed
once, by this tree's build, so the baseline must share its packed layout (``bs_pack_linear*``).
Engine code outside the kernels (Python, the KV cache's pages) is this tree's on both sides.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from engine import EngineConfig, LLMEngine, SamplingParams, cpu_kernels

from . import neighbour
from .settings import SETTINGS
from .workloads import WORKLOADS, Workload, build

KINDS = ("prefill", "decode")
MAIN_KEYS = (*KINDS, "all")  # the ratios of every round's line; the decode bands' keys come after
# Bands of rows the decode-only steps are reported in: fixed reporting bands, not the kernels' settings
# (those live in engine/csrc/linear_rows.h alone). They were drawn where the linear kernels' regimes
# changed when this split was written (below 8 rows a pass waits on the weight stream; up to 15 one
# pass over each panel, up to 24 two), and a kernel change that moves those edges leaves the report
# valid, only coarser. A workload's "median batch" hides where its decode time goes: W1 at 135M has
# a median of 16 rows, yet most of its decode-only time is at 1-7 and 17-24 rows.
DECODE_BANDS = ((1, 7), (8, 15), (16, 24), (25, None))


def baseline_sources(baseline: str, into: Path) -> list[Path]:
    """The baseline's kernel sources, copied into ``into``: a directory's ``*.c``/``*.h``, or
    ``engine/csrc/`` at a git revision."""
    if Path(baseline).is_dir():
        files = [f for f in Path(baseline).iterdir() if f.suffix in (".c", ".h")]
        for f in files:
            shutil.copy(f, into / f.name)
    else:
        root = Path(cpu_kernels.SOURCES).parent.parent
        listed = _git(root, "ls-tree", "--name-only", f"{baseline}:engine/csrc").split()
        for name in listed:
            (into / name).write_text(_git(root, "show", f"{baseline}:engine/csrc/{name}"))
    sources = sorted(into.glob("*.c"))
    if not sources:
        raise SystemExit(f"no kernel sources in the baseline {baseline!r}")
    return sources


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def baseline_library(baseline: str, workdir: Path):
    """The baseline's kernels, built and opened with every signature declared; refused where its
    interface is not this tree's (the engine would call it with arguments it does not take)."""
    if (why := cpu_kernels.why_off()) is not None:
        raise SystemExit(f"the CPU kernels are off here ({why}): nothing to compare")
    target = workdir / "baseline.so"
    cpu_kernels.build(cpu_kernels.compiler(), baseline_sources(baseline, workdir), target)
    try:
        library = cpu_kernels.open_library(target)
        cpu_kernels.check_interface(library)
    except cpu_kernels.InterfaceError as exc:
        raise SystemExit(f"{baseline}'s kernels cannot run under this tree's engine: {exc}") from None
    return library


def step_kind(result) -> str:
    return "decode" if all(s.kind == "decode" for s in result.record.segments) else "prefill"


def band_key(low: int, high: int | None) -> str:
    return f"decode {low}-{high} rows" if high is not None else f"decode {low}+ rows"


def decode_band(rows: int) -> str:
    """The key of the band of DECODE_BANDS a decode-only step of ``rows`` rows falls in."""
    return band_key(*next((lo, hi) for lo, hi in DECODE_BANDS if hi is None or rows <= hi))


def step_keys(result) -> tuple[str, ...]:
    """Where a step's time is summed: its kind, and a decode-only step's band of rows too."""
    kind = step_kind(result)
    if kind == "prefill":
        return (kind,)
    return kind, decode_band(sum(s.num_rows for s in result.record.segments))


def run_round(engines: dict, libraries: dict, workload: Workload, first: int) -> dict:
    """The workload on both engines in lockstep; summed step seconds per build, kind and decode band."""
    for engine in engines.values():
        for spec in workload.requests:
            engine.add_request(spec.prompt, SamplingParams(max_tokens=spec.max_tokens, temperature=0,
                                                           ignore_eos=True))
    spent = {name: dict.fromkeys(KINDS, 0.0) for name in engines}  # and the decode bands met
    names, step = list(engines), first
    while any(e.has_unfinished for e in engines.values()):
        for name in (names if step % 2 == 0 else names[::-1]):
            with cpu_kernels.using(libraries[name]):
                start = time.perf_counter()
                result = engines[name].step()
                took = time.perf_counter() - start
                for key in step_keys(result):
                    spent[name][key] = spent[name].get(key, 0.0) + took
        step += 1
    return spent


def ratios(spent: dict) -> dict:
    """current / baseline time per kind and over all steps (below 1: the current build is faster)."""
    cur, base = spent["current"], spent["baseline"]
    out = {key: cur[key] / base[key] for key in base if base[key] > 0}
    out["all"] = sum(cur[kind] for kind in KINDS) / sum(base[kind] for kind in KINDS)
    return out


def summary(rounds: list[dict]) -> dict:
    keys = [k for k in rounds[0] if all(k in r for r in rounds)]
    return {k: {"median": statistics.median(r[k] for r in rounds), "min": min(r[k] for r in rounds),
                "max": max(r[k] for r in rounds)} for k in keys}


def decode_shares(spent_rounds: list[dict]) -> dict:
    """Each decode band's share of the baseline's decode-only time over all rounds, in band order."""
    base = [spent["baseline"] for spent in spent_rounds]
    total = sum(b["decode"] for b in base)
    met = [key for key in (band_key(*band) for band in DECODE_BANDS) if any(key in b for b in base)]
    return {band: sum(b.get(band, 0.0) for b in base) / total for band in met} if total > 0 else {}


def report(result: dict) -> str:
    """The summary line, then the decode bands' ratios with their shares of the decode time."""
    line = ", ".join(f"{k} {s['median']:.3f} [{s['min']:.3f}-{s['max']:.3f}]"
                     for k, s in result["summary"].items() if k in MAIN_KEYS)
    bands = ", ".join(f"{band.removeprefix('decode ')} {result['summary'][band]['median']:.3f} ({share:.0%})"
                      for band, share in result["decode_shares"].items() if band in result["summary"])
    return f"median [min-max]: {line}" + (f"\ndecode-only steps by rows, median (share of their time): {bands}"
                                          if bands else "")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lockstep", description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="a git revision, or a directory of kernel sources")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="full")
    parser.add_argument("--workload", choices=WORKLOADS, default="W1")
    parser.add_argument("--model", default="default", help="'default', an HF directory or a .gguf")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kv-cache-gb", type=float, default=0.5, help="each engine's KV pool (GiB)")
    parser.add_argument("--neighbour", type=neighbour.argument, default=None, metavar="BUSY_MS,PERIOD_MS",
                        help="a process busy BUSY_MS of every PERIOD_MS beside the run (benchmarks/neighbour.py)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: print only)")
    return parser.parse_args(argv)


def make_engine(args: argparse.Namespace) -> LLMEngine:
    setting = SETTINGS[args.setting]
    return LLMEngine(args.model, EngineConfig.from_kwargs(
        device="cpu", dtype=args.dtype, max_num_batched_tokens=setting.token_budget,
        max_num_seqs=setting.max_num_seqs, kv_cache_memory_gb=args.kv_cache_gb, policy="mixed",
        enable_chunked_prefill=True, enable_prefix_caching=False))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp, neighbour.running(args.neighbour):
        libraries = {"current": cpu_kernels.load(), "baseline": baseline_library(args.baseline, Path(tmp))}
        engines = {name: make_engine(args) for name in libraries}
        vocab = engines["current"].loaded.config.vocab_size
        run_round(engines, libraries, build(args.workload, SETTINGS[args.setting], 1, vocab), 0)  # warm-up
        workload, spent_rounds = build(args.workload, SETTINGS[args.setting], 0, vocab), []
        for r in range(args.rounds):
            spent_rounds.append(run_round(engines, libraries, workload, r))
            shown = {k: v for k, v in ratios(spent_rounds[-1]).items() if k in MAIN_KEYS}
            print(f"round {r}: current / baseline time " + ", ".join(f"{k} {v:.3f}" for k, v in shown.items()),
                  flush=True)
    rounds = [ratios(spent) for spent in spent_rounds]
    result = {"baseline": args.baseline, "dtype": args.dtype, "workload": args.workload, "setting": args.setting,
              "neighbour": args.neighbour and vars(args.neighbour), "rounds": rounds, "summary": summary(rounds),
              "decode_shares": decode_shares(spent_rounds)}
    print(report(result))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
