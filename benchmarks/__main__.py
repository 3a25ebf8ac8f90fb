"""``python -m benchmarks [--setting small|full] [--workloads W1,W2,W3] [--out PATH]``

Prints markdown tables and the targets, and writes everything (per-step figures included)
as JSON. Peers, workloads and the measurement rules are described in BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .peers import OPT_IN_PEERS, PEERS, PeerContext
from .report import cpu_targets, engines_tables, markdown_tables, target_dicts, targets_table, write_json
from .runner import DEFAULT_PEERS, run_benchmark
from .settings import SETTINGS
from .workloads import WORKLOADS


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="small")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset of W1,W2,W3")
    parser.add_argument("--model", default="default", help="'default', an HF directory or a .gguf")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every peer")
    parser.add_argument("--kv-cache-gb", type=float, default=None, help="KV pool of every peer (GiB)")
    parser.add_argument("--token-budget", type=int, default=None,
                        help="Batchscope's max_num_batched_tokens and generate_batch's max_batch_tokens "
                             "(default: the setting's)")
    parser.add_argument("--peers", default=None,
                        help=f"comma-separated subset of {','.join(PEERS)} (default: all but the opt-in "
                             f"{','.join(OPT_IN_PEERS)})")
    parser.add_argument("--repeats", type=int, default=None,
                        help="measured runs per peer, in rounds over all peers (A B, B A, ..), each peer loaded once, "
                             "so that repeat r of two peers runs seconds apart (default: the setting's)")
    parser.add_argument("--in-process", action="store_true",
                        help="run peers in this process (quick checks; peak memory is then shared)")
    parser.add_argument("--no-telemetry", action="store_true", help="skip the telemetry-cost experiment")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/<setting>.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; choose from {WORKLOADS}")
    chosen = list(PEERS if args.peers is None else dict.fromkeys(p.strip() for p in args.peers.split(",") if p.strip()))
    if set(chosen) - set(PEERS):
        raise SystemExit(f"unknown peer(s) {sorted(set(chosen) - set(PEERS))}; choose from {PEERS}")
    if args.peers is None:
        chosen = [p for p in chosen if p not in OPT_IN_PEERS]
    peers = {w: tuple(p for p in chosen if p in DEFAULT_PEERS[w] or p in OPT_IN_PEERS) for w in WORKLOADS}
    setting = SETTINGS[args.setting]
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    ctx = PeerContext(
        model=args.model, device=device, dtype=dtype, token_budget=args.token_budget or setting.token_budget,
        max_num_seqs=setting.max_num_seqs, hf_batch_size=setting.hf_batch_size,
        kv_cache_memory_gb=args.kv_cache_gb or (4.0 if device == "cuda" else 0.5),
        max_model_len=setting.max_model_len,
    )
    results = run_benchmark(setting, workloads, ctx, args.threads, peers, telemetry=not args.no_telemetry,
                            in_process=args.in_process, log=lambda msg: print(msg, file=sys.stderr, flush=True),
                            repeats=args.repeats)
    results["command"] = "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv)
    results["targets"] = target_dicts(cpu_targets(results))
    out = args.out or Path(__file__).parent / "results" / f"{setting.name}.json"
    write_json(results, out)
    print(markdown_tables(results))
    print(engines_tables(results))
    print(targets_table(results["targets"]))
    print(f"\nwritten {out} ({results['elapsed_s']} s)")
    return results


if __name__ == "__main__":
    main()
