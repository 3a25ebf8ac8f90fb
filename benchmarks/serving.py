"""Online serving against vLLM-CPU, measured with vLLM's own benchmark client.

    python -m benchmarks.serving [--rates 2 3 4 6] [--num-prompts 128] [--repeats 2] [--backend openai]
                                 [--dtype float32|bfloat16] [--temperature T] [--top-p P]
                                 [--model default|qwen2.5-0.5b|qwen2.5-1.5b|DIR] [--goodput ttft:2000 tpot:150]

Both servers stay resident for the whole sitting, on the same model directory (``--model``: the
default model, an HF directory with a tokenizer, or a random-weight shape of benchmarks.shapes,
which both servers and the client then tokenize with its word tokenizer, ``--tokenizer``), dtype
(``--dtype``, fp32 by default), threads (all cores), token budget, ``max_num_seqs`` and KV space:
Batchscope's ``app.py`` (its OpenAI API; API limits raised so one benchmarking client is not
throttled) and vLLM's OpenAI server from ``.venv-vllm`` (``make vllm-install``) as deployed,
compiled by torch.compile at start (not ``--enforce-eager``). For each repeat and rate, vLLM's client
(``vllm.benchmarks.serve`` through benchmarks/serving_client.py: ``--dataset-name random``,
seeded input and output lengths, a Poisson ``--request-rate``, ``--ignore-eos``, the model's
tokenizer) runs against one server, then the other; the order alternates (A B, B A) so both see
the same host. Requests sample as the servers' defaults (temperature 1.0, no filter) unless
``--temperature`` / ``--top-p`` set them, as a chat application's requests often do (the client
sends them in every request). Each run has prompts of its own (its own seed; the same for both servers), so no
run finds the last one's prompts in a prefix cache. One unmeasured run per server first warms it
up. Each run reports TTFT / TPOT / ITL p50 and p99, output throughput and goodput
under the SLO (``--goodput ttft:2000 tpot:150`` by default, vLLM's flag and form: a bigger model
on two cores cannot keep a 150 ms TPOT at any rate, and the sitting says which SLO it used).

The headline, per engine: the highest rate whose median run kept the SLO at p99 (by default TTFT p99
<= 2 s and TPOT p99 <= 150 ms), it and every rate below it (a rate kept above one missed is reported
beside it, not as the limit), and the best goodput; then Batchscope / vLLM ratios of that highest
rate (by the medians, by the rate kept in every repeat, and each repeat's own; a bound where a
server kept every rate tried, or none: its limit lies above the highest, or below the lowest) and of
goodput per rate, with their spread over the repeats; the table gives each rate's TPOT p99 and
goodput run by run beside the medians, and the last line each server's output at the highest rate
tried against what the client offered (past a server's limit, its capacity, which bounds the rate it
sustains).
Results: benchmarks/results/serving/serving.{json,md}; ``python -m benchmarks.serving_pool`` reports
several sittings' runs pooled rate by rate.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integrations" / "vllm"))
import launch  # noqa: E402

from engine.config import TOKENIZER_FILES, tokenizer_files  # noqa: E402

from .shapes import SHAPES, shaped_model, words_tokenizer  # noqa: E402

ENGINES = ("batchscope", "vllm")
OUT = ROOT / "benchmarks" / "results" / "serving"
SAVED = "serving.json"  # what a sitting saves under its --out: its setting, runs and summary
METRICS = ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p50_itl_ms", "p99_itl_ms",
           "output_throughput", "request_goodput", "completed")
# What decides a rate, run by run: a median of two runs reads 134 ms from 98 and 170, one run in the SLO
# and one out of it, so the table gives each repeat's value beside the medians.
PER_REPEAT = ("p99_tpot_ms", "request_goodput")


@dataclass(frozen=True)
class Slo:
    """What a run must keep at p99 for a rate to count as sustained, and what vLLM's client
    counts as goodput (its ``--goodput ttft:MS tpot:MS``)."""

    ttft_ms: float = 2000
    tpot_ms: float = 150

    @classmethod
    def parse(cls, items: list[str]) -> Slo:
        """``["ttft:2000", "tpot:150"]`` (either may be left out: it keeps its default)."""
        limits = {}
        for item in items:
            name, _, value = item.partition(":")
            if name not in ("ttft", "tpot") or not value.replace(".", "", 1).isdigit() or float(value) <= 0:
                raise ValueError(f"--goodput {item}: expected ttft:MS or tpot:MS with MS a positive number")
            limits[f"{name}_ms"] = float(value)
        return cls(**limits)

    def met_by(self, row: dict) -> bool:
        return row["p99_ttft_ms"] <= self.ttft_ms and row["p99_tpot_ms"] <= self.tpot_ms

    def goodput_flags(self) -> list[str]:
        """vLLM's client's ``--goodput`` for this SLO (and this module's own flag, in the same form)."""
        return ["--goodput", f"ttft:{self.ttft_ms:g}", f"tpot:{self.tpot_ms:g}"]

    def text(self) -> str:
        return f"TTFT p99 <= {self.ttft_ms:g} ms and TPOT p99 <= {self.tpot_ms:g} ms"


@dataclass(frozen=True)
class Setting:
    rates: tuple[float, ...] = (2.0, 3.0, 4.0, 6.0)
    # Twice max_num_seqs: a rate above what a server sustains must build a queue. With 48
    # prompts (fewer than the batch holds) every request was admitted at once however high the
    # rate, and both servers "kept the SLO" at 14 req/s in bf16, vLLM making 280 tok/s of it.
    num_prompts: int = 128
    input_len: int = 160
    range_ratio: float = 0.5  # inputs of 80-240 tokens, outputs of 24-72 (vLLM's client draws both in the range)
    output_len: int = 48
    repeats: int = 2
    backend: str = "openai"  # "openai-chat": /v1/chat/completions
    dtype: str = "float32"
    budget: int = 512
    max_num_seqs: int = 64
    kv_gib: int = 1
    seed: int = 0
    temperature: float | None = None  # None: the server's default (1.0 in both)
    top_p: float | None = None  # None: no top-p filter
    model: str = "default"  # "default", a name in benchmarks.shapes.SHAPES, or an HF directory
    slo: Slo = Slo()


@dataclass(frozen=True)
class Served:
    """What both servers load, and the tokenizer they and the client use."""

    model: Path
    tokenizer: Path

    def tokenizer_flags(self) -> list[str]:
        """A server's ``--tokenizer``, where it is not the model's own."""
        return [] if self.tokenizer == self.model else ["--tokenizer", str(self.tokenizer)]


def start_batchscope(served: Served, setting: Setting, logs: Path) -> launch.Server:
    port = launch.free_port()
    command = [sys.executable, str(ROOT / "app.py"), "--model", str(served.model), *served.tokenizer_flags(),
               "--host", "127.0.0.1",
               "--port", str(port), "--dtype", setting.dtype, "--max-num-batched-tokens", str(setting.budget),
               "--max-num-seqs", str(setting.max_num_seqs), "--kv-cache-memory-gb", str(setting.kv_gib),
               "--api-max-concurrent-per-client", "4096", "--api-max-waiting", "4096"]
    return launch.start(command, port, logs / "serving-batchscope.log")


def start_vllm(served: Served, setting: Setting, logs: Path) -> launch.Server:
    return launch.start_vllm(served.model, launch.free_port(), logs / "serving-vllm.log", *served.tokenizer_flags(),
                             "--max-num-batched-tokens", str(setting.budget),
                             "--max-num-seqs", str(setting.max_num_seqs), "--dtype", setting.dtype,
                             env={"VLLM_CPU_KVCACHE_SPACE": str(setting.kv_gib)}, eager=False)


def wait_ready(name: str, server: launch.Server) -> None:
    """Until the server answers and, for Batchscope, its model has loaded."""
    path = "/healthz" if name == "batchscope" else "/health"
    server.wait_healthy(path)
    deadline = time.monotonic() + launch.LOAD_LIMIT_S
    while name == "batchscope" and time.monotonic() < deadline:
        with urllib.request.urlopen(server.url + path, timeout=5) as answer:
            if json.load(answer).get("status") == "ready":
                return
        time.sleep(1)


def client_flags(setting: Setting, rate: float, tokenizer: Path, model: str, run: int) -> list[str]:
    """vLLM's client for one run; ``run`` picks its prompts (``--seed``): each run of a sitting
    gets prompts of its own, the two servers the same ones. With one seed for every run, each
    run repeated the last one's prompts and prefix caching served them from the KV cache: vLLM's
    hit rate reached 55% over a sitting, fp32 at 3 req/s read twice Batchscope's goodput (0.49x), while
    Batchscope's LRU cache, smaller than a run's tokens, held few of the next run's (8.5%)."""
    endpoint = "/v1/chat/completions" if setting.backend == "openai-chat" else "/v1/completions"
    return ["--backend", setting.backend, "--endpoint", endpoint, "--model", model,
            "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", str(setting.input_len), "--random-output-len", str(setting.output_len),
            "--random-range-ratio", str(setting.range_ratio), "--num-prompts", str(setting.num_prompts),
            "--request-rate", str(rate), "--seed", str(setting.seed + run), "--ignore-eos",
            "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
            *setting.slo.goodput_flags(), *sampling_flags(setting)]


def sampling_flags(setting: Setting) -> list[str]:
    """The client's sampling flags: only those the sitting sets (the rest stay the servers' defaults)."""
    chosen = {"--temperature": setting.temperature, "--top-p": setting.top_p}
    return [part for flag, value in chosen.items() if value is not None for part in (flag, str(value))]


def run_client(url: str, flags: list[str], out: Path, log: Path) -> dict:
    command = [str(launch.VLLM_PYTHON), str(ROOT / "benchmarks" / "serving_client.py"), str(out),
               "--base-url", url, *flags]
    with log.open("a") as sink:
        subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=True, timeout=1800,
                       env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
    result = json.loads(out.read_text())
    return {name: result.get(name) for name in METRICS}


MODELS = {"batchscope": "default", "vllm": launch.SERVED_NAME}  # each server's name for the model


def warm_up(servers: dict[str, launch.Server], setting: Setting, tokenizer: Path, logs: Path) -> None:
    """One unmeasured run per server, the lowest rate with the sitting's prompts: the first
    requests a fresh server takes are slower (seen here: Batchscope's TTFT p99 4.3 s and vLLM's
    1.4 s in their first runs, 0.1 s and 0.6 s in the next), and a sitting measures servers as
    they run. A warm-up of 16 prompts was not enough: both servers' first measured run after it
    was still the slowest (bf16, 192 prompts at 5 req/s: goodput 0.50 and 0.46 req/s, against
    4.83 and 4.66 in the next repeat)."""
    for name in ENGINES:
        flags = client_flags(setting, min(setting.rates), tokenizer, MODELS[name], run=0)
        run_client(servers[name].url, flags, logs / f"serving-{name}-warm-up.json", logs / "serving-client.log")
        print(f"{name}: warmed up", flush=True)


def measure(servers: dict[str, launch.Server], setting: Setting, tokenizer: Path, logs: Path) -> dict:
    """results[engine][rate] = one metrics dict per repeat; the order alternates per run."""
    results: dict[str, dict[str, list[dict]]] = {name: {} for name in ENGINES}
    turn = 0
    for repeat in range(setting.repeats):
        for rate in setting.rates:
            order = ENGINES if turn % 2 == 0 else ENGINES[::-1]
            turn += 1
            for name in order:
                flags = client_flags(setting, rate, tokenizer, MODELS[name], run=turn)
                run = run_client(servers[name].url, flags, logs / f"serving-{name}-{rate}-{repeat}.json",
                                 logs / "serving-client.log")
                results[name].setdefault(str(rate), []).append(run)
                print(f"repeat {repeat} rate {rate} {name}: goodput {run['request_goodput']:.2f} req/s, "
                      f"TTFT p99 {run['p99_ttft_ms']:.0f} ms, TPOT p99 {run['p99_tpot_ms']:.0f} ms", flush=True)
    return results


def median_of(runs: list[dict]) -> dict:
    return {name: statistics.median(r[name] for r in runs) for name in METRICS}


def split_at_first_miss(kept: dict[str, bool]) -> tuple[list[float], list[float]]:
    """The rates kept within the SLO from the lowest up to the first miss (what the server
    sustains), and those kept above a miss (a run's prompts can fall kindly at a higher rate)."""
    rates = sorted(kept, key=float)
    cut = next((i for i, rate in enumerate(rates) if not kept[rate]), len(rates))
    return [float(r) for r in rates[:cut]], [float(r) for r in rates[cut:] if kept[r]]


def sustained_rates(by_rate: dict, slo: Slo) -> tuple[list[float], list[float]]:
    """``split_at_first_miss`` of one row (a median) per rate."""
    return split_at_first_miss({rate: slo.met_by(row) for rate, row in by_rate.items()})


def kept_in_every_run(by_rate: dict[str, list[dict]], slo: Slo) -> tuple[float | None, bool]:
    """The highest rate that it and every rate below kept within the SLO in every one of their runs,
    and whether that was every rate tried. In a sitting it is the lowest of the repeats' own limits;
    it keeps that meaning for pooled sittings, whose rates have different numbers of runs."""
    sustained, _ = split_at_first_miss({rate: all(slo.met_by(run) for run in runs) for rate, runs in by_rate.items()})
    return max(sustained, default=None), len(sustained) == len(by_rate)


def repeat_limits(by_rate: dict[str, list[dict]], slo: Slo) -> list[tuple[float | None, bool]]:
    """Per repeat, from that repeat's own runs: the highest rate kept within the SLO (from the lowest
    up) and whether that was every rate tried. An empty list where the rates have different numbers
    of runs (pooled sittings with different grids): no repeat then tried every rate."""
    counts = {len(runs) for runs in by_rate.values()}
    if len(counts) != 1:
        return []
    limits = []
    for repeat in range(counts.pop()):
        sustained, _ = sustained_rates({rate: runs[repeat] for rate, runs in by_rate.items()}, slo)
        limits.append((max(sustained, default=None), len(sustained) == len(by_rate)))
    return limits


def rate_ratio(ours: tuple[float | None, bool], theirs: tuple[float | None, bool], lowest: float) -> dict | None:
    """Batchscope's highest rate within the SLO over vLLM's. A server that kept every rate tried has
    its limit higher still, so the ratio is then a bound ("at least", "at most"); one that kept none
    has it below the lowest rate tried ("more than" the other's rate over the lowest, "less than" the
    lowest over the other's). None where neither kept any, or both kept them all."""
    (rate, ours_higher), (their_rate, theirs_higher) = ours, theirs
    if (not rate and not their_rate) or (ours_higher and theirs_higher):
        return None
    if not their_rate:  # vLLM's limit lies below the lowest rate tried
        return {"ratio": rate / lowest, "bound": "more than"}
    if not rate:
        return {"ratio": lowest / their_rate, "bound": "less than"}
    return {"ratio": rate / their_rate, "bound": "at least" if ours_higher else "at most" if theirs_higher else None}


def summarize(results: dict, slo: Slo = Slo()) -> dict:
    medians = {name: {rate: median_of(runs) for rate, runs in by_rate.items()} for name, by_rate in results.items()}
    headline, limits = {}, {}
    for name, by_rate in medians.items():
        sustained, above = sustained_rates(by_rate, slo)
        by_medians = (max(sustained, default=None), len(sustained) == len(by_rate))  # all kept: its limit lies higher
        per_repeat = repeat_limits(results[name], slo)
        every = kept_in_every_run(results[name], slo)
        limits[name] = {"by_medians": by_medians, "per_repeat": per_repeat, "in_every_repeat": every}
        headline[name] = {"highest_rate_within_slo": by_medians[0], "every_rate_within_slo": by_medians[1],
                          "kept_above_a_miss": above,
                          "highest_rate_each_repeat": [rate for rate, _ in per_repeat],
                          "highest_rate_in_every_repeat": every[0],
                          "best_goodput": max(row["request_goodput"] for row in by_rate.values())}
    ours, theirs = limits["batchscope"], limits["vllm"]
    lowest = min(float(rate) for rate in results["batchscope"])
    rate_ratios = {"by_medians": rate_ratio(ours["by_medians"], theirs["by_medians"], lowest),
                   "in_every_repeat": rate_ratio(ours["in_every_repeat"], theirs["in_every_repeat"], lowest),
                   "per_repeat": [rate_ratio(a, b, lowest)
                                  for a, b in zip(ours["per_repeat"], theirs["per_repeat"], strict=True)]}
    ratios = {rate: paired_ratio(results, rate, "request_goodput") for rate in results["batchscope"]}
    best = headline["vllm"]["best_goodput"]
    headline["best_goodput_ratio"] = headline["batchscope"]["best_goodput"] / best if best else None
    per_repeat = {name: {rate: {metric: [run[metric] for run in runs] for metric in PER_REPEAT} for rate, runs in by_rate.items()}
                  for name, by_rate in results.items()}
    top = max(results["batchscope"], key=float)
    return {"medians": medians, "per_repeat": per_repeat, "headline": headline, "lowest_rate": lowest,
            "highest_rate_ratio": rate_ratios, "goodput_ratio_per_rate": ratios,
            "highest_rate_output": {"rate": top, "ratio": paired_ratio(results, top, "output_throughput")}}


def paired_ratio(results: dict, rate: str, metric: str) -> dict | None:
    """Batchscope / vLLM of ``metric`` at ``rate``, repeat by repeat: the median and the spread."""
    pairs = [a[metric] / b[metric] for a, b in zip(results["batchscope"][rate], results["vllm"][rate], strict=True)
             if b[metric]]
    return {"median": statistics.median(pairs), "min": min(pairs), "max": max(pairs)} if pairs else None


def markdown(setting: Setting, summary: dict) -> str:
    lines = [f"SLO: {setting.slo.text()}; model {setting.model}, "
             f"{setting.backend}, {setting.dtype}, "
             f"random inputs {setting.input_len} and outputs {setting.output_len} x (1 +- {setting.range_ratio}) tokens, "
             f"{setting.num_prompts} prompts per run, {runs_text(summary)} (medians); sampling: "
             f"{' '.join(sampling_flags(setting)) or 'server defaults'}.", "",
             "| engine | rate | goodput req/s | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | ITL p50 / p99 ms "
             "| TPOT p99 per repeat ms | goodput per repeat |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, by_rate in summary["medians"].items():
        for rate, m in by_rate.items():
            each = summary["per_repeat"][name][rate]
            lines.append(f"| {name} | {rate} | {m['request_goodput']:.2f} | {m['output_throughput']:.0f} | "
                         f"{m['p50_ttft_ms']:.0f} / {m['p99_ttft_ms']:.0f} | {m['p50_tpot_ms']:.0f} / "
                         f"{m['p99_tpot_ms']:.0f} | {m['p50_itl_ms']:.0f} / {m['p99_itl_ms']:.0f} | "
                         f"{', '.join(f'{ms:.0f}' for ms in each['p99_tpot_ms'])} | "
                         f"{', '.join(f'{g:.2f}' for g in each['request_goodput'])} |")
    head = summary["headline"]
    lines += ["", *(f"- {name}: highest rate within the SLO{highest_text(head[name], summary['lowest_rate'])}, "
                    f"best goodput {head[name]['best_goodput']:.2f} req/s" for name in ENGINES)]
    rates = summary["highest_rate_ratio"]
    each = ", ".join(ratio_text(r) for r in rates["per_repeat"])  # none where pooled grids differ
    lines.append(f"- highest rate within the SLO, Batchscope / vLLM: {ratio_text(rates['by_medians'])} by the medians, "
                 f"{ratio_text(rates['in_every_repeat'])} in every repeat" + (f"; per repeat {each}" if each else ""))
    ratio = head["best_goodput_ratio"]
    lines.append(f"- best goodput, Batchscope / vLLM: {ratio:.2f}x" if ratio else "- best goodput ratio: n/a")
    for rate, r in summary["goodput_ratio_per_rate"].items():
        if r:
            lines.append(f"- rate {rate}: goodput ratio {r['median']:.2f}x (repeats {r['min']:.2f}-{r['max']:.2f})")
    return "\n".join([*lines, top_rate_text(setting, summary)])


def runs_text(summary: dict) -> str:
    """How many runs each rate's medians are over: a sitting's repeats, or pooled sittings' runs."""
    counts = sorted({len(runs["p99_tpot_ms"]) for by_rate in summary["per_repeat"].values() for runs in by_rate.values()})
    if len(counts) > 1:
        return f"{counts[0]}-{counts[-1]} runs a rate"
    return repeats_text(counts[0])


def repeats_text(count: int) -> str:
    return f"{count} repeat" + ("s" if count != 1 else "")


def top_rate_text(setting: Setting, summary: dict) -> str:
    """Each server's output at the highest rate tried against what the client offered: past a
    server's limit, what it can deliver at all (its capacity, which bounds the rate it sustains)."""
    top = summary["highest_rate_output"]
    rate, ratio = top["rate"], top["ratio"]
    offered = float(rate) * setting.output_len
    output = {name: summary["medians"][name][rate]["output_throughput"] for name in ENGINES}
    delivered = ", ".join(f"{name} {tok_s:.0f} tok/s ({tok_s / offered:.0%})" for name, tok_s in output.items())
    spread = f"{ratio['median']:.2f}x (repeats {ratio['min']:.2f}-{ratio['max']:.2f})" if ratio else "n/a"
    return (f"- at {rate} req/s, the highest rate tried ({offered:.0f} output tok/s offered on average): {delivered}; "
            f"Batchscope / vLLM {spread}")


def ratio_text(ratio: dict | None) -> str:
    if ratio is None:
        return "n/a"
    bounds = {"at least": ">= ", "at most": "<= ", "more than": "> ", "less than": "< ", None: ""}
    return bounds[ratio["bound"]] + f"{ratio['ratio']:.2f}x"


def highest_text(headline: dict, lowest: float) -> str:
    rate = headline["highest_rate_within_slo"]
    if rate is None:
        return f": none of the rates tried (the lowest, {lowest} req/s, missed it)"
    if headline["every_rate_within_slo"]:
        return f" {rate} req/s (every rate tried: its limit lies higher)"
    above = ", ".join(f"{r} req/s" for r in headline["kept_above_a_miss"])
    return f" {rate} req/s" + (f" ({above} kept it too, above a rate that missed it)" if above else "")


def parse_args() -> tuple[Setting, Path]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving", description=__doc__.splitlines()[0])
    default = Setting()
    parser.add_argument("--rates", type=float, nargs="+", default=list(default.rates))
    parser.add_argument("--num-prompts", type=int, default=default.num_prompts)
    parser.add_argument("--repeats", type=int, default=default.repeats)
    parser.add_argument("--backend", choices=("openai", "openai-chat"), default=default.backend)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=default.dtype)
    parser.add_argument("--temperature", type=float, default=None, help="every request's temperature "
                        "(default: the servers' own, 1.0)")
    parser.add_argument("--top-p", type=float, default=None, help="every request's top_p (default: no top-p)")
    parser.add_argument("--model", default=default.model, help="'default', an HF directory with a tokenizer, "
                        f"or a random-weight shape ({', '.join(SHAPES)})")
    parser.add_argument("--goodput", nargs="+", default=[], metavar="KEY:MS",
                        help=f"the SLO, as vLLM's client takes it (default: {' '.join(Slo().goodput_flags()[1:])})")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    try:
        slo = Slo.parse(args.goodput)
    except ValueError as error:
        parser.error(str(error))
    if not launch.VLLM_PYTHON.exists():
        parser.error(f"{launch.VLLM_PYTHON} is missing: run `make vllm-install` first")
    if (why := unservable(args.model)) is not None:
        parser.error(why)
    return Setting(rates=tuple(args.rates), num_prompts=args.num_prompts, repeats=args.repeats,
                   backend=args.backend, dtype=args.dtype, temperature=args.temperature, top_p=args.top_p,
                   model=args.model, slo=slo), args.out


def unservable(model: str) -> str | None:
    """Why ``--model`` cannot be served and measured (the servers and the client need a
    tokenizer), or None."""
    if model == "default" or model in SHAPES:
        return None
    directory = Path(model).expanduser()
    if not (directory / "config.json").is_file():
        return f"--model {model}: not 'default', a shape ({', '.join(SHAPES)}) or an HF directory with a config.json"
    if not tokenizer_files(directory):
        return (f"--model {model}: the directory has no tokenizer ({', '.join(TOKENIZER_FILES)}), which the servers "
                "and vLLM's client need; for a random-weight shape, pass its name")
    return None


def served(model: str) -> Served:
    """The directories for ``--model`` (checked by ``unservable``)."""
    if model in SHAPES:
        return Served(shaped_model(model), words_tokenizer(model))
    directory = launch.default_model_dir() if model == "default" else Path(model).expanduser()
    return Served(directory, directory)


def exit_on_sigterm() -> None:
    """SIGTERM (``timeout``, ``kill``) exits through ``finally``, so the app this benchmark started
    is stopped with it instead of left running."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def report(out: Path, setting: Setting, results: dict, preface: tuple[str, ...] = (), **extra) -> None:
    """Judge ``results`` by the setting's SLO, write serving.json and serving.md under ``out`` and
    print the text (``preface``: lines above it; ``extra``: more keys for the JSON)."""
    summary = summarize(results, setting.slo)
    out.mkdir(parents=True, exist_ok=True)
    saved = {"setting": asdict(setting), **extra, "results": results, **summary}
    (out / SAVED).write_text(json.dumps(saved, indent=1))
    text = "\n".join([*preface, markdown(setting, summary)])
    (out / "serving.md").write_text(text + "\n")
    print(text)


def main() -> None:
    setting, out = parse_args()
    exit_on_sigterm()
    out.mkdir(parents=True, exist_ok=True)
    model = served(setting.model)
    servers = {"batchscope": start_batchscope(model, setting, out), "vllm": start_vllm(model, setting, out)}
    try:
        for name, server in servers.items():
            wait_ready(name, server)
        warm_up(servers, setting, model.tokenizer, out)
        results = measure(servers, setting, model.tokenizer, out)
    finally:
        for server in servers.values():
            server.stop()
    report(out, setting, results)


if __name__ == "__main__":
    main()
