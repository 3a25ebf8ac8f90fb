"""Runs a whole benchmark: the machine's ceilings, the peers (each loaded once in a worker process
of its own, then the repeats in rounds over all of them), the telemetry experiment, then figures
and targets, into one results dict."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from .external import interpreter, missing_reason, resolved_model
from .memory import oom_kills
from .metrics import decode_efficiency, flops_ceiling, prefill_efficiency, run_ceilings
from .peers import PeerContext
from .report import agreement, machine_info
from .roofline import ModelShapes, gemm_peak, memory_bandwidth, weight_bytes
from .sessions import ROOT, open_session, worker_env
from .settings import Setting
from .timings import StepStat
from .worker import execute, model_shapes
from .workloads import WARMUP_SEED, build

DEFAULT_PEERS = {
    "W1": ("hf_generate", "hf_generate_batch", "bs_mixed", "bs_mixed_nochunk", "bs_prefill_first"),
    "W2": ("hf_generate", "hf_generate_batch", "bs_mixed", "bs_mixed_nochunk", "bs_prefill_first"),
    "W3": ("hf_generate", "hf_generate_batch", "bs_mixed", "bs_mixed_nocache"),
}


def run_telemetry(job: dict, timeout_s: float, in_process: bool = False) -> dict:
    """The telemetry experiment in a worker process (or, for tests, in this one); its JSON result."""
    if in_process:
        return json.loads(json.dumps(execute(job)))
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "job.json", Path(tmp) / "out.json"
        spec.write_text(json.dumps(job))
        proc = subprocess.run([sys.executable, "-m", "benchmarks.worker", str(spec), str(out)], cwd=ROOT, env=worker_env(),
                              capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"telemetry worker failed:\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text())


def ceilings(ctx: PeerContext, rows: int) -> dict:
    device = torch.device(ctx.device)
    shapes = model_shapes(ctx.model)
    return {
        "shapes": shapes.to_dict(),
        "gemm": gemm_peak(shapes, rows, ctx.torch_dtype, device),
        "bandwidth_bytes_per_s": memory_bandwidth(device, mbytes=1024 if device.type == "cuda" else 256),
    }


def run_benchmark(setting: Setting, workloads: list[str], ctx: PeerContext, threads: int,
                  peers: dict[str, tuple[str, ...]] | None = None, telemetry: bool = True,
                  timeout_s: float = 1800, in_process: bool = False, log=print, repeats: int | None = None) -> dict:
    torch.set_num_threads(threads)
    peers = peers or DEFAULT_PEERS
    started = time.time()
    roof = ceilings(ctx, setting.token_budget)
    log(f"GEMM peak {roof['gemm']['peak_flops_per_s'] / 1e9:.1f} GFLOP/s at {setting.token_budget} rows, "
        f"copy bandwidth {roof['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s")
    vocab = roof["shapes"]["vocab"]
    results = {
        "setting": setting.to_dict(), "context": asdict(ctx), "machine": machine_info(threads),
        "roofline": roof, "workloads": {},
    }
    for w in workloads:
        workload = build(w, setting, 0, vocab)
        results["workloads"][w] = {
            "description": workload.description, "num_prompt_tokens": workload.num_prompt_tokens,
            "num_output_tokens": workload.num_output_tokens, "peers": {},
        }
    _run_peers(results, peers, workloads, ctx, {"setting": setting.name, "threads": threads},
               repeats or setting.repeats, timeout_s, in_process, log)
    if telemetry and "W1" in workloads:
        results["telemetry"] = run_telemetry({"ctx": asdict(ctx), "setting": setting.name,
                                        "threads": threads}, timeout_s, in_process)
        log(f"telemetry: {results['telemetry']['direct_cost']:.2%} of step-loop time, A/B {results['telemetry']['throughput_cost']:.1%}")
    # The peak again at the end: on a shared machine the larger of the two is the honest one.
    again = gemm_peak(model_shapes(ctx.model), setting.token_budget, ctx.torch_dtype, torch.device(ctx.device))
    if again["peak_flops_per_s"] > roof["gemm"]["peak_flops_per_s"]:
        roof["gemm"] = again
    _score(results, setting, ctx, threads)
    results["warmup_seed"] = WARMUP_SEED
    results["elapsed_s"] = round(time.time() - started, 1)
    return results


def rounds(peers: list[str], repeats: int) -> list[tuple[int, list[str]]]:
    """Repeat r of every peer in round r, the rounds in alternating order (A B C, C B A, A B C ..):
    on a shared host whose speed drifts from minute to minute, repeat r of two peers then runs
    seconds apart, and a linear drift cancels over two rounds."""
    return [(r, peers if r % 2 == 0 else peers[::-1]) for r in range(repeats)]


def _run_peers(results: dict, peers: dict[str, tuple[str, ...]], workloads: list[str], ctx: PeerContext,
               base: dict, repeats: int, timeout_s: float, in_process: bool, log) -> None:
    """Every peer of ``workloads`` loaded once, in a process of its own, then ``repeats`` rounds over
    them; a missing peer is reported as missing, a failed one as failed (with the repeats it
    finished before), never skipped silently."""
    order = list(dict.fromkeys(p for w in workloads for p in peers[w]))
    results["failed"], results["missing"], results["peer_info"] = {}, {}, {}
    for peer in order:
        reason = missing_reason(peer, ctx.model, in_process)
        if reason is not None:
            results["missing"][peer] = reason
            log(f"{peer}: MISSING: {reason}")
    sessions = {}
    try:
        for peer in (p for p in order if p not in results["missing"]):
            job = base | {"peer": peer, "workloads": [w for w in workloads if peer in peers[w]],
                          "ctx": asdict(ctx) | {"model": resolved_model(peer, ctx.model)}}
            sessions[peer] = _open(results, job, timeout_s, in_process, log)
        for r, round_order in rounds([p for p in order if sessions.get(p)], repeats):
            for peer in (p for p in round_order if p not in results["failed"]):
                _run_repeat(results, peer, sessions[peer], r, log)
    finally:
        for session in filter(None, sessions.values()):
            _close(session)


def _open(results: dict, job: dict, timeout_s: float, in_process: bool, log):
    """The peer's session, loaded and warmed up; None (and the peer failed) if it would not start."""
    peer, t, kills = job["peer"], time.time(), oom_kills()
    try:
        session = open_session(job, timeout_s, in_process, interpreter(peer))
    except RuntimeError as exc:  # the other peers still count
        said = str(exc) + out_of_memory(kills)
        results["failed"][peer] = f"setup: {said[-2000:]}"
        log(f"{peer}: FAILED to start after {time.time() - t:.0f} s: {said[-500:]}")
        return None
    log(f"{peer}: loaded and warmed up ({time.time() - t:.0f} s)")
    results["peer_info"][peer] = session.info
    return session


def _run_repeat(results: dict, peer: str, session, r: int, log) -> None:
    """Repeat ``r`` of one peer's workloads, merged into ``results``."""
    t, kills = time.time(), oom_kills()
    try:
        out = session.repeat(r)
    except RuntimeError as exc:
        said = str(exc) + out_of_memory(kills)
        results["failed"][peer] = f"repeat {r}: {said[-2000:]}"
        log(f"{peer}: FAILED in repeat {r} after {time.time() - t:.0f} s: {said[-500:]}")
        return
    log(f"{peer} (repeat {r}): " + ", ".join(f"{w} {e['figures']['output_tok_s']} tok/s" for w, e in out.items())
        + f" ({time.time() - t:.0f} s)")
    for w, entry in out.items():
        entries = results["workloads"][w]["peers"]
        entries[peer] = merge_repeats(entries.get(peer), entry)


def out_of_memory(kills_before: int | None) -> str:
    """A last line for a peer's failure when the OOM killer ended a process since ``kills_before``
    (a worker's engine process dies without a word of why: vLLM's says only "Executor failed")."""
    kills = oom_kills()
    if kills_before is None or kills is None or kills <= kills_before:
        return ""
    return (f"\nthe Linux OOM killer ended {kills - kills_before} process(es) meanwhile (/proc/vmstat oom_kill): "
            "the peers' workers, resident together, did not fit in memory; run fewer peers at once "
            "(--peers A,B, then --peers C,D)")


def _close(session) -> None:
    try:
        session.close()
    except RuntimeError:  # a worker that already failed: its error is in results["failed"]
        pass


def merge_repeats(so_far: dict | None, more: dict) -> dict:
    """A peer's workload entry with one more round's repeats: the tok/s of every repeat in order, the
    figures and steps of the fastest, the token ids of the first (the prompts every peer shares)."""
    if so_far is None:
        return more
    merged = dict(so_far, repeats_output_tok_s=so_far["repeats_output_tok_s"] + more["repeats_output_tok_s"])
    if more["figures"]["output_tok_s"] > so_far["figures"]["output_tok_s"]:
        merged |= {k: more[k] for k in ("figures", "steps", "peak_mem_method")}
    return merged


def _score(results: dict, setting: Setting, ctx: PeerContext, threads: int) -> None:
    """Each Batchscope peer's steps against the ceilings of its own dtype; the peers' agreement."""
    roof = results["roofline"]
    for w in results["workloads"].values():
        for name, entry in w["peers"].items():
            if entry["steps"]:
                dtype = getattr(torch, results["peer_info"][name]["precision"])
                entry.update(_efficiency(entry["steps"], _gemm_for(roof, dtype, setting, ctx), roof, setting,
                                         dtype.itemsize, threads))
        w["agreement"] = agreement(w["peers"])


def _gemm_for(roof: dict, dtype: torch.dtype, setting: Setting, ctx: PeerContext) -> dict:
    """The GEMM peak in ``dtype`` (a bf16 peer in an fp32 run gets its own, measured once)."""
    if dtype == ctx.torch_dtype:
        return roof["gemm"]
    key = f"gemm_{str(dtype).removeprefix('torch.')}"
    if key not in roof:
        roof[key] = gemm_peak(ModelShapes(**roof["shapes"]), setting.token_budget, dtype, torch.device(ctx.device))
    return roof[key]


def _efficiency(steps: list[dict], gemm: dict, roof: dict, setting: Setting, itemsize: int, threads: int) -> dict:
    """Batchscope's steps against the ceilings (the other peers have no steps)."""
    stats = [StepStat(**s) for s in steps]
    weights, bandwidth = weight_bytes(ModelShapes(**roof["shapes"]), itemsize), roof["bandwidth_bytes_per_s"]
    probe, min_rows = gemm["peak_flops_per_s"], setting.token_budget // 2
    peak = flops_ceiling(stats, probe, min_rows)
    ceilings = run_ceilings(stats, weights, bandwidth, peak)
    if ceilings:  # (none without steps)
        ceilings |= {"peak_gflop_s": round(peak / 1e9, 1), "probe_gflop_s": round(probe / 1e9, 1)}
    return {"prefill": prefill_efficiency(stats, probe, min_rows, threads),
            "decode": decode_efficiency(stats, weights, bandwidth, peak), "ceilings": ceilings}
