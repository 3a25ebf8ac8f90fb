"""The results document: machine, tables (markdown, so they paste into BENCHMARKS.md),
token agreement between peers, and each target with its measured value."""
from __future__ import annotations

import json
import platform
import statistics
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

COLUMNS = (  # (figure key, header)
    ("output_tok_s", "out tok/s"), ("total_tok_s", "total tok/s"),
    ("ttft_ms_p50", "TTFT p50 ms"), ("ttft_ms_p99", "TTFT p99 ms"), ("ttft_ms_mean", "TTFT mean ms"),
    ("itl_ms_p50", "ITL p50 ms"), ("itl_ms_p99", "ITL p99 ms"), ("late_ttft_ms", "late TTFT ms"),
    ("peak_mem_mb", "peak MB"), ("output_tok_cpu_s", "out tok/CPU-s"),
)
REFERENCE_PEER = "hf_generate"
FALLBACK_REFERENCE = "bs_mixed"  # agreement reference when transformers did not run
# Batchscope against each CPU engine at matching precision (bf16 against llama.cpp's F16 and Q4_1).
ENGINE_PAIRS = (
    ("bs_mixed", "vllm_cpu", 1.2), ("bs_mixed_bf16", "vllm_cpu_bf16", 1.2),
    ("bs_mixed", "llama_cpp_f32", 1.0), ("bs_mixed_bf16", "llama_cpp_f16", 1.0),
    ("bs_mixed_bf16", "llama_cpp_q4_1", 1.0),
)
# What batch invariance costs (EngineConfig.batch_invariant): reported beside the engines, no goal.
INVARIANCE_PAIRS = (("bs_mixed_invariant", "bs_mixed"), ("bs_mixed_bf16_invariant", "bs_mixed_bf16"))


def machine_info(threads: int) -> dict:
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": threads,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        keep = ("Model name", "CPU(s)", "Thread(s) per core", "L2 cache", "L3 cache")
        info["cpu"] = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lscpu.splitlines())
                       if k.strip() in keep}
    except (OSError, subprocess.CalledProcessError):
        info["cpu"] = platform.processor()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def reference_peer(peers: dict[str, dict]) -> str | None:
    return next((p for p in (REFERENCE_PEER, FALLBACK_REFERENCE) if p in peers), None)


def agreement(peers: dict[str, dict]) -> dict[str, float]:
    """Fraction of requests whose greedy tokens equal the reference peer's (repeat 0)."""
    ref = reference_peer(peers)
    if ref is None:
        return {}
    reference = peers[ref]["token_ids"]
    return {
        name: round(sum(a == b for a, b in zip(reference, p["token_ids"])) / len(reference), 3)
        for name, p in peers.items() if name != ref
    }


def paired_ratios(results: dict, workload: str, ours: str, theirs: str) -> list[float]:
    """Output tok/s of ``ours`` over ``theirs``, repeat by repeat (same prompts per repeat)."""
    peers = results["workloads"].get(workload, {}).get("peers", {})
    if ours not in peers or theirs not in peers:
        return []
    a, b = peers[ours]["repeats_output_tok_s"], peers[theirs]["repeats_output_tok_s"]
    return [round(x / y, 3) for x, y in zip(a, b) if y]


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} [{min(values):.3g}-{max(values):.3g}]" if values else "-"


def engines_tables(results: dict) -> str:
    """Each peer's repeats with versions and precision, then Batchscope / engine ratios."""
    info = results.get("peer_info", {})
    lines = []
    for name, w in results["workloads"].items():
        lines += [f"### {name}: output tok/s per repeat (median [min-max])", "",
                  "| peer | engine | precision | median [min-max] | repeats |", "|---|---|---|---|---|"]
        for peer, p in w["peers"].items():
            i = info.get(peer, {})
            engine = f"{i.get('engine', '?')} {i.get('version', '')}".strip()
            lines.append(f"| {peer} | {engine} | {i.get('precision', '?')} | {_spread(p['repeats_output_tok_s'])} "
                         f"| {p['repeats_output_tok_s']} |")
        pairs = [(o, t, paired_ratios(results, name, o, t))
                 for o, t in [pair[:2] for pair in ENGINE_PAIRS] + list(INVARIANCE_PAIRS)]
        pairs = [x for x in pairs if x[2]]
        if pairs:
            lines += ["", "| Batchscope / peer (paired by repeat) | ratio median [min-max] |", "|---|---|"]
            lines += [f"| {o} / {t} | {_spread(r)} |" for o, t, r in pairs]
        lines.append("")
    for peer, reason in results.get("missing", {}).items():
        lines.append(f"- **{peer} missing**: {reason}")
    return "\n".join(lines)


@dataclass
class TargetResult:
    name: str
    value: float | None
    threshold: float
    higher_is_better: bool
    detail: str

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.threshold if self.higher_is_better else self.value <= self.threshold


def _fig(results: dict, workload: str, peer: str, key: str):
    return results["workloads"].get(workload, {}).get("peers", {}).get(peer, {}).get("figures", {}).get(key)


def _ratio(a, b) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def scheduling_targets(results: dict) -> list[TargetResult]:
    """W2 and W3: Batchscope against itself, on any device."""
    w2 = [_fig(results, "W2", p, "itl_ms_p99") for p in ("bs_mixed", "bs_prefill_first")]
    w3 = [_fig(results, "W3", p, "ttft_ms_mean") for p in ("bs_mixed_nocache", "bs_mixed")]
    return [
        TargetResult("W2 ITL p99 of running requests: bs_mixed / bs_prefill_first", _ratio(*w2), 0.5, False,
                     f"{w2[0]} ms vs {w2[1]} ms"),
        TargetResult("W3 mean TTFT: prefix caching off / on", _ratio(*w3), 1.5, True, f"{w3[0]} ms vs {w3[1]} ms"),
    ]


def cpu_targets(results: dict) -> list[TargetResult]:
    hf = [v for p in ("hf_generate", "hf_generate_batch") if (v := _fig(results, "W1", p, "output_tok_s"))]
    hf_cpu = [v for p in ("hf_generate", "hf_generate_batch") if (v := _fig(results, "W1", p, "output_tok_cpu_s"))]
    ours, ours_cpu = _fig(results, "W1", "bs_mixed", "output_tok_s"), _fig(results, "W1", "bs_mixed", "output_tok_cpu_s")
    prefill = _w1_peer(results, "bs_mixed").get("prefill", {})
    telemetry = results.get("telemetry") or {}
    return [
        TargetResult("W1 output tok/s: bs_mixed / faster transformers peer", _ratio(ours, max(hf, default=None)), 2.0,
                     True, f"bs_mixed {ours} vs transformers {hf}; per CPU-second: {_ratio(ours_cpu, max(hf_cpu, default=None))}"),
        TargetResult("W1 prefill-heavy steps: fraction of GEMM peak (forward, median)",
                     prefill.get("forward_fraction_median"), 0.6, True,
                     f"{prefill.get('num_steps', 0)} steps, {prefill.get('gflop_s_median')} GFLOP/s; "
                     f"whole step: {prefill.get('step_fraction_median')}; per CPU-second: {prefill.get('cpu_fraction_median')}"),
        *scheduling_targets(results),
        *engine_targets(results),
        TargetResult("Telemetry (records + one JSON subscriber): share of step-loop time", telemetry.get("direct_cost"),
                     0.03, False,
                     f"{(telemetry.get('engine_unphased') or {}).get('unphased_ms_mean')} ms building + "
                     f"{telemetry.get('subscriber_ms_per_step')} ms delivering per step; A/B throughput cost "
                     f"{telemetry.get('throughput_cost')} (paired ratios {telemetry.get('paired_ratios')}: "
                     f"within the noise between rounds)"),
    ]


def engine_targets(results: dict) -> list[TargetResult]:
    """W1 against the CPU engines (median of paired ratios), and decode steps against the
    bandwidth floor; only for the peers that ran."""
    out = []
    for ours, theirs, goal in ENGINE_PAIRS:
        ratios = paired_ratios(results, "W1", ours, theirs)
        if ratios:
            median = statistics.median(ratios)
            out.append(TargetResult(f"W1 output tok/s: {ours} / {theirs}", round(median, 3), goal, True,
                                    f"paired by repeat: {ratios}{_ceilings(results, ours, median)}"))
    for peer in ("bs_mixed", "bs_mixed_bf16"):
        decode = _w1_peer(results, peer).get("decode", {})
        if decode.get("num_steps"):
            out.append(TargetResult(f"W1 {peer} decode-only steps: bandwidth floor / forward (median)",
                                    decode["forward_fraction_median"], 0.75, True,
                                    f"{decode['num_steps']} steps, median batch {decode['batch_median']}"
                                    f"{_attainable(decode)}"))
    return out


def _w1_peer(results: dict, peer: str) -> dict:
    """The peer's W1 results, or {} where it did not run."""
    return results["workloads"].get("W1", {}).get("peers", {}).get(peer, {})


def _attainable(decode: dict) -> str:
    """What the floor fraction can reach on this host: the steps at their roofline."""
    if "attainable_fraction_median" not in decode:
        return ""
    return (f"; at most {decode['attainable_fraction_median']:.0%} on this host (at their roofline, "
            f"{decode['roofline_ms_median']} ms: the longer of their FLOPs at the GEMM peak and their bytes)")


def _ceilings(results: dict, peer: str, ratio: float) -> str:
    """The ratio if the peer's steps ran at their roofline (metrics.run_ceilings)."""
    c = _w1_peer(results, peer).get("ceilings")
    if not c:
        return ""
    return (f"; at most {ratio / c['decode_at_roofline']:.2f} with its decode-only steps at their roofline, "
            f"{ratio / c['all_at_roofline']:.2f} with every step at its roofline{_peak_taken(c)}")


def _peak_taken(ceilings: dict) -> str:
    """Where the rooflines' GEMM peak is the run's own fastest step, not the probe (metrics.flops_ceiling)."""
    if ceilings.get("peak_gflop_s", 0) <= ceilings.get("probe_gflop_s", 0):
        return ""
    return (f" (the GEMM peak taken: the run's fastest prefill-heavy step, {ceilings['peak_gflop_s']} GFLOP/s, "
            f"above the probe's {ceilings['probe_gflop_s']})")


def markdown_tables(results: dict) -> str:
    lines = []
    for name, w in results["workloads"].items():
        lines += [f"### {name}: {w['description']}", ""]
        lines.append("| peer | " + " | ".join(h for _, h in COLUMNS) + " |")
        lines.append("|---" * (len(COLUMNS) + 1) + "|")
        for peer, p in w["peers"].items():
            cells = [_cell(p["figures"].get(k)) for k, _ in COLUMNS]
            lines.append(f"| {peer} | " + " | ".join(cells) + " |")
        lines.append("")
        for peer, p in w["peers"].items():
            if p.get("prefill", {}).get("num_steps"):
                f = p["prefill"]
                lines.append(f"- {peer} prefill-heavy steps: {f['num_steps']} (median {f['rows_median']} rows), "
                             f"{f['gflop_s_median']} GFLOP/s = {f['forward_fraction_median']:.0%} of GEMM peak "
                             f"(forward phase), {f['step_fraction_median']:.0%} over the whole step, "
                             f"{f['cpu_fraction_median']:.0%} per CPU-second of the step")
            if p.get("decode", {}).get("num_steps"):
                f = p["decode"]
                lines.append(f"- {peer} decode-only steps: {f['num_steps']} (median batch {f['batch_median']}), "
                             f"forward {f['forward_ms_median']} ms vs bandwidth floor {f['floor_ms_median']} ms "
                             f"= {f['forward_fraction_median']:.0%} (whole step {f['step_fraction_median']:.0%})"
                             f"{_attainable(f)}")
            if p.get("ceilings"):
                c = p["ceilings"]
                lines.append(f"- {peer} at its roofline (each step the longer of its FLOPs at the GEMM peak and its "
                             f"bytes at the bandwidth): decode-only steps {c['decode_share']:.0%} of the run, which "
                             f"would take {c['decode_at_roofline']:.0%} of its time with them at their roofline, "
                             f"{c['all_at_roofline']:.0%} with every step at its roofline{_peak_taken(c)}")
        if w.get("agreement"):
            lines.append(f"- greedy tokens equal to {reference_peer(w['peers'])}'s (fraction of requests): {w['agreement']}")
        lines.append("")
    for peer, reason in results.get("failed", {}).items():
        lines.append(f"- **{peer} failed**: {reason.strip().splitlines()[-1] if reason.strip() else 'no message'}")
    return "\n".join(lines)


def targets_table(targets: list[dict]) -> str:
    lines = ["| target | measured | goal | met | detail |", "|---|---|---|---|---|"]
    for t in targets:
        goal = (">= " if t["higher_is_better"] else "<= ") + str(t["threshold"])
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        lines.append(f"| {t['name']} | {_cell(t['value'])} | {goal} | {met} | {t['detail']} |")
    return "\n".join(lines)


def target_dicts(targets: list[TargetResult]) -> list[dict]:
    return [asdict(t) | {"met": t.met} for t in targets]


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if isinstance(value, float) and value >= 100 else str(value)


def read_json_object(path: Path, missing: str) -> dict:
    """A saved JSON object; ValueError naming the file where it is absent (``missing`` says what it
    should have been), is not JSON, or holds something other than an object."""
    if not path.is_file():
        raise ValueError(f"{path}: {missing}")
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: not a JSON object")
    return saved


def write_json(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
