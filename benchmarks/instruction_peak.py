"""How close the linears come to the silicon: each of a model's linear shapes at the token budget's
rows, on Batchscope's kernel and on torch's best (its default linear or oneDNN's prepacked one, as
``roofline.gemm_peak`` times them), as a fraction of the vector units' own peak, measured on
registers alone (instruction_peak.c). The W1 report's "GEMM peak" is torch's best; this says what
that best is worth. fp32 and, where the CPU has AVX512-BF16, bf16 weights (Batchscope's timed as
``cpu_kernels.linear`` calls it: fp32 rows, rounded to bf16 inside the call where its kernel wants).

    python -m benchmarks.instruction_peak [--model DIR] [--rows 256] [--threads 2]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
from pathlib import Path

import torch

from engine import cpu_kernels

from .roofline import ModelShapes, best_seconds, gemm_peak, linear_rates
from .worker import model_shapes

SOURCE = Path(__file__).with_name("instruction_peak.c")
ITERS = 20_000_000


def _library() -> ctypes.CDLL:
    """instruction_peak.c built as the kernels are (their compiler, flags and cache)."""
    if (cc := cpu_kernels.compiler()) is None:
        raise SystemExit("no C compiler: instruction_peak needs gcc or cc")
    built = cpu_kernels.cached_build(cc, "instruction-peak", [SOURCE, cpu_kernels.SOURCES / "vec.h"])
    library = ctypes.CDLL(str(built))
    library.bs_instruction_peak.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    library.bs_instruction_peak.restype = ctypes.c_double
    return library


def instruction_peak(dtype: torch.dtype, threads: int, tries: int = 5) -> float:
    """FLOP/s of the vector units on registers alone (best of ``tries``); 0 where unsupported."""
    library, sink = _library(), ctypes.c_float()
    return max(library.bs_instruction_peak(int(dtype == torch.bfloat16), ITERS, threads, ctypes.byref(sink))
               for _ in range(tries))


def batchscope_rates(shapes: ModelShapes, rows: int, dtype: torch.dtype) -> dict[str, float]:
    """FLOP/s of Batchscope's linear kernel on each linear shape (fp32 rows, weights in ``dtype``)."""
    def seconds(n_in: int, n_out: int) -> float:
        x, packed = torch.randn(rows, n_in), cpu_kernels.pack_linear(torch.randn(n_out, n_in).to(dtype))
        return best_seconds(lambda: cpu_kernels.linear(x, packed, None, n_out), torch.device("cpu"), 0.3)

    return linear_rates(shapes, rows, seconds)


def measure(shapes: ModelShapes, rows: int, dtype: torch.dtype, threads: int) -> dict:
    """One dtype's linears against the vector units' peak, or why it was skipped."""
    peak, name = instruction_peak(dtype, threads), str(dtype).removeprefix("torch.")
    if not peak:
        return {"dtype": name, "skipped": "this CPU has no AVX512-BF16"}
    ours, torchs = batchscope_rates(shapes, rows, dtype), gemm_peak(shapes, rows, dtype, torch.device("cpu"))
    return {
        "dtype": name, "rows": rows, "instruction_peak_gflop_s": round(peak / 1e9, 1),
        "shapes": {name: {"batchscope": round(ours[name] / peak, 3), "torch": round(torchs["flops_per_s"][name] / peak, 3)}
                   for name in ours},
        "batchscope_median": round(statistics.median(ours.values()) / peak, 3),
        "torch_median": round(statistics.median(torchs["flops_per_s"].values()) / peak, 3),
    }


def report(result: dict) -> str:
    if "skipped" in result:
        return f"{result['dtype']}: skipped ({result['skipped']})"
    lines = [f"{result['dtype']}, {result['rows']} rows: vector units' peak {result['instruction_peak_gflop_s']} "
             f"GFLOP/s on registers alone", "| linear | Batchscope | torch's best |", "|---|---|---|"]
    lines += [f"| {name} | {s['batchscope']:.0%} | {s['torch']:.0%} |" for name, s in result["shapes"].items()]
    lines.append(f"| median | {result['batchscope_median']:.0%} | {result['torch_median']:.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="'default', an HF directory or a .gguf")
    parser.add_argument("--rows", type=int, default=256, help="rows of each matmul (the token budget)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/instruction_peak.json"))
    args = parser.parse_args(argv)
    if (why := cpu_kernels.why_off()) is not None:
        raise SystemExit(f"Batchscope's CPU kernels are off here ({why}): nothing to compare")
    torch.set_num_threads(args.threads)
    shapes = model_shapes(args.model)
    results = [measure(shapes, args.rows, dtype, args.threads) for dtype in (torch.float32, torch.bfloat16)]
    for result in results:
        print(report(result), end="\n\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": args.model, "shapes": shapes.to_dict(), "results": results}, indent=1))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
