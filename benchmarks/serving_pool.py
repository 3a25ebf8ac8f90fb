"""Serving sittings pooled: every run of each rate from several sittings, judged as one.

    python -m benchmarks.serving_pool DIR_OR_JSON [DIR_OR_JSON ...] [--out DIR]

Design note. One sitting of ``benchmarks.serving`` rarely resolves both servers' limits: the first
grid leaves a limit between two rates or below the lowest, and the next sitting tries the rates
around it. A rate tried in both then has twice the runs. BENCHMARKS.md pooled such sittings by
hand, with numbers no command gave. This module merges each sitting's saved runs, rate by rate,
and reports them as one sitting would: each rate's median over all its runs, the highest rate
within the SLO by those medians and in every run, best goodput, goodput ratios per rate.

Only sittings that measured the same thing pool: the same model, dtype, backend, prompts per run,
lengths, sampling, servers' limits and SLO. Their rates, repeats and seed may differ. Where the
rates have different numbers of runs there is no per-repeat limit (no repeat tried every rate);
"in every repeat" still means every run of the rate and of every rate below it. A sitting saved
before a field of ``Setting`` existed ran with that field's default, so it is read as the default.
"""
from __future__ import annotations

import argparse
from dataclasses import fields, replace
from pathlib import Path

from .report import read_json_object
from .serving import ENGINES, OUT, SAVED, Setting, Slo, repeats_text, report

FREE = ("rates", "repeats", "seed")  # what may differ between sittings that pool
POOLED_OUT = OUT.parent / "serving-pooled"


def load_sitting(path: Path) -> tuple[Setting, dict]:
    """A sitting's setting and runs from its directory or its serving.json."""
    file = path / SAVED if path.is_dir() else path
    saved = read_json_object(file, "not found (the --out directory of `python -m benchmarks.serving`, or its "
                                   f"{SAVED})")
    if not {"setting", "results"} <= saved.keys() or set(saved["results"]) != set(ENGINES):
        raise ValueError(f"{file}: not a serving sitting (it needs 'setting' and both servers' 'results')")
    known = {f.name for f in fields(Setting)}
    values = {name: value for name, value in saved["setting"].items() if name in known}
    values["rates"] = tuple(values["rates"])
    values["slo"] = Slo(**values.get("slo", {}))
    return Setting(**values), saved["results"]


def pooled_setting(settings: list[Setting], paths: list[Path]) -> Setting:
    """The one setting the sittings share, its rates all of theirs; an error names what differs."""
    for field in fields(Setting):
        values = [getattr(setting, field.name) for setting in settings]
        if field.name not in FREE and len(set(map(repr, values))) > 1:
            each = ", ".join(f"{value!r} ({path})" for value, path in zip(values, paths, strict=True))
            raise ValueError(f"the sittings differ in {field.name}: {each}; only {', '.join(FREE)} may differ")
    rates = tuple(sorted({rate for setting in settings for rate in setting.rates}))
    return replace(settings[0], rates=rates, repeats=sum(setting.repeats for setting in settings))


def pool_results(results: list[dict]) -> dict:
    """results[engine][rate]: every sitting's runs of that rate, in the sittings' order."""
    pooled = {name: {} for name in ENGINES}
    for sitting in results:
        for name in ENGINES:
            for rate, runs in sitting[name].items():
                pooled[name].setdefault(rate, []).extend(runs)
    return {name: dict(sorted(by_rate.items(), key=lambda item: float(item[0]))) for name, by_rate in pooled.items()}


def pool(paths: list[Path], out: Path) -> None:
    sittings = [load_sitting(path) for path in paths]
    setting = pooled_setting([s for s, _ in sittings], paths)
    results = pool_results([r for _, r in sittings])
    described = [f"{path} (rates {', '.join(f'{rate:g}' for rate in s.rates)}; {repeats_text(s.repeats)})"
                 for path, (s, _) in zip(paths, sittings, strict=True)]
    report(out, setting, results, preface=(f"Pooled from {len(paths)} sittings: {'; '.join(described)}.", ""),
           pooled_from=[str(path) for path in paths])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving_pool", description=__doc__.splitlines()[0])
    parser.add_argument("sittings", type=Path, nargs="+", help=f"a sitting's --out directory or its {SAVED}")
    parser.add_argument("--out", type=Path, default=POOLED_OUT)
    args = parser.parse_args()
    try:
        pool(args.sittings, args.out)
    except ValueError as error:
        parser.error(str(error))


if __name__ == "__main__":
    main()
