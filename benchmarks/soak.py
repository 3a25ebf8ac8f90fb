"""A long session: does the server's memory stay where it started after 30 minutes of mixed use?

    python -m benchmarks.soak [--minutes 30] [--warmup-minutes 2] [--bound-mib 300]
                              [--model default] [other app.py flags]

Design. The real ``app.py`` runs as a subprocess (benchmarks/room.py ``start_app``), and the
session is a workshop's minutes, one after another. Each minute has a busy part and a quiet part:

- busy (``--busy`` s): visitors fire the page's presets through its own Gradio endpoint (a
  different preset each minute, benchmarks/room_load.py ``Firers``), API streams run
  /v1/completions, and viewers come and go: each connects to /ws/telemetry (half with the cookie
  they had, half as new visitors), reads for a few seconds and leaves. Every few minutes a tab
  records a trace (the Record toggle on, then off) and downloads the file.
- quiet: the load stops and the engine drains; then a visitor's greedy request is solo-checked
  (POST /batchscope/solo-check, which waits for an idle engine), or, every ``--compare-every``
  minutes, a Compare runs (two engines of the model loaded, run and shut down, in the server).
- then one sample, always at the same point of the minute, the engine idle: the server's RSS
  (/proc VmRSS), its threads and open file descriptors, the KV pool's free and total blocks
  (/metrics: idle, every block must be free), requests finished so far.

The verdict compares the last sample with the one at the end of the warm-up (``--warmup-minutes``:
the allocator's and the caches' first growth is not a leak): RSS within ``--bound-mib``, threads
and file descriptors back where they were, every KV block free. Results as a Markdown table and
JSON in benchmarks/results/soak/ (git-ignored). Numbers are measured and said, never asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from benchmarks.room import ROOT, proc_status_field, proc_status_mib, start_app
from benchmarks.room_load import ApiStreams, Firers, FireSetting, cancel
from benchmarks.room_summary import metric_value
from benchmarks.serving import exit_on_sigterm, launch, wait_ready
from benchmarks.soak_visits import Reconnects, Visits

OUT = ROOT / "benchmarks" / "results" / "soak"
PRESETS = ("chat", "mixed", "system", "staggered", "article")


@dataclass(frozen=True)
class SoakSetting:
    model: str = "default"
    minutes: int = 30
    warmup_minutes: int = 2
    busy_s: float = 40.0
    firers: int = 6
    api_streams: int = 2
    viewers: int = 12
    compare_every: int = 5
    record_every: int = 3
    bound_mib: float = 300.0
    app_flags: tuple[str, ...] = ()


@dataclass
class Sample:
    """The server at the quiet point of one minute."""

    minute: int
    t: float
    rss_mib: float
    threads: int
    fds: int
    kv_free: int
    kv_total: int
    finished: int
    quiet_activity: str
    quiet_result: str


@dataclass
class Tally:
    """What the session did, and what went wrong (each error with its text)."""

    clicks: int = 0
    api_streams: int = 0
    connections: int = 0
    records: int = 0
    errors: list[str] = field(default_factory=list)


def proc_counts(pid: int) -> tuple[int, int]:
    """The process's threads and open file descriptors."""
    return proc_status_field(pid, "Threads"), len(os.listdir(f"/proc/{pid}/fd"))


async def sample(server: launch.Server, http: httpx.AsyncClient, minute: int, quiet: tuple[str, str]) -> Sample:
    metrics = (await http.get("/metrics")).text
    pid = server.process.pid
    threads, fds = proc_counts(pid)
    finished = sum(float(line.split()[-1]) for line in metrics.splitlines()
                   if line.startswith("batchscope_requests_finished_total{"))  # every finish_reason
    return Sample(minute, time.time(), proc_status_mib(pid), threads, fds,
                  int(metric_value(metrics, "batchscope_kv_blocks_free")),
                  int(metric_value(metrics, "batchscope_kv_blocks_total")), int(finished), *quiet)


async def drained(http: httpx.AsyncClient, timeout_s: float = 180.0) -> bool:
    """Wait until nothing runs or waits (the quiet part's activities need an idle engine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        metrics = (await http.get("/metrics")).text
        if metric_value(metrics, "batchscope_requests_running") + metric_value(metrics, "batchscope_requests_waiting") == 0:
            return True
        await asyncio.sleep(0.5)
    return False


async def busy(setting: SoakSetting, url: str, minute: int, tally: Tally, visits: Visits) -> None:
    """The busy part of a minute: fire, stream, reconnect, and maybe record a trace."""
    firers = Firers(url, FireSetting(preset=PRESETS[minute % len(PRESETS)], every_s=10.0), setting.firers)
    api = ApiStreams(url, setting.api_streams, max_tokens=32)
    reconnects = Reconnects(url, setting.viewers, visits.cookies)
    tasks = [asyncio.create_task(job.run()) for job in (firers, api, reconnects)]
    if minute % setting.record_every == 0:
        tasks.append(asyncio.create_task(visits.record(setting.busy_s / 2, tally)))
    await asyncio.sleep(setting.busy_s)
    await cancel(*tasks)
    tally.clicks += len(firers.clicks)
    tally.api_streams += api.completed
    tally.connections += reconnects.opened
    tally.errors += firers.errors + api.errors + reconnects.errors


async def quiet(setting: SoakSetting, http: httpx.AsyncClient, minute: int, visits: Visits) -> tuple[str, str]:
    """The quiet part: the engine drains, then a Compare or a solo check."""
    if not await drained(http):
        return "drain", "the engine did not drain in 180 s"
    if minute % setting.compare_every == setting.compare_every - 1:
        return "compare", await visits.compare()
    return "solo check", await visits.solo_check()


async def session(setting: SoakSetting, server: launch.Server) -> tuple[list[Sample], Tally]:
    tally, samples = Tally(), []
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as http:
        visits = Visits(server.url, http)
        samples.append(await sample(server, http, 0, ("start", "")))
        for minute in range(1, setting.minutes + 1):
            await busy(setting, server.url, minute, tally, visits)
            outcome = await quiet(setting, http, minute, visits)
            samples.append(await sample(server, http, minute, outcome))
            print(row(samples[-1]), flush=True)
    return samples, tally


def row(s: Sample) -> str:
    return (f"| {s.minute} | {s.rss_mib:.0f} | {s.threads} | {s.fds} | {s.kv_free} / {s.kv_total} | "
            f"{s.finished} | {s.quiet_activity}: {s.quiet_result} |")


def verdict(setting: SoakSetting, samples: list[Sample]) -> dict:
    """The last sample against the one at the end of the warm-up."""
    start = samples[min(setting.warmup_minutes, len(samples) - 1)]
    end = samples[-1]
    growth = end.rss_mib - start.rss_mib
    return {"rss_start_mib": round(start.rss_mib), "rss_end_mib": round(end.rss_mib),
            "rss_growth_mib": round(growth), "rss_peak_mib": round(max(s.rss_mib for s in samples)),
            "rss_within_bound": growth <= setting.bound_mib,
            "threads": [start.threads, end.threads], "fds": [start.fds, end.fds],
            "kv_all_free_at_every_sample": all(s.kv_free == s.kv_total for s in samples[1:])}  # 0: no step yet


def report(setting: SoakSetting, samples: list[Sample], tally: Tally, out: Path) -> str:
    v = verdict(setting, samples)
    within = "within" if v["rss_within_bound"] else "OUTSIDE"
    lines = [
        f"Soak: {setting.minutes} minutes of mixed use ({setting.busy_s:g} s busy each: {setting.firers} visitors "
        f"firing presets, {setting.api_streams} API streams, {setting.viewers} viewers reconnecting, a recording "
        f"every {setting.record_every} min; then drained: a solo check, a Compare every {setting.compare_every} "
        f"min); model {setting.model}.", "",
        "| minute | RSS MiB | threads | open fds | KV blocks free / total | requests finished | quiet part |",
        "|---|---|---|---|---|---|---|", *map(row, samples), "",
        f"- RSS: {v['rss_start_mib']} MiB after the {setting.warmup_minutes}-minute warm-up, {v['rss_end_mib']} MiB "
        f"at the end ({v['rss_growth_mib']:+d} MiB: {within} the {setting.bound_mib:g} MiB bound), peak "
        f"{v['rss_peak_mib']} MiB",
        f"- threads {v['threads'][0]} -> {v['threads'][1]}, open fds {v['fds'][0]} -> {v['fds'][1]}; every KV "
        f"block free at every quiet point: {'yes' if v['kv_all_free_at_every_sample'] else 'NO'}",
        f"- clicks {tally.clicks}, API streams {tally.api_streams}, viewer connections {tally.connections}, "
        f"recordings {tally.records}; errors {len(tally.errors)}"
        + (f" (first: {tally.errors[0]})" if tally.errors else "")]
    text = "\n".join(lines)
    out.mkdir(parents=True, exist_ok=True)
    data = {"setting": asdict(setting), "samples": [asdict(s) for s in samples], "verdict": v,
            "tally": {**asdict(tally), "errors": tally.errors[:50], "error_count": len(tally.errors)}}
    (out / "soak.json").write_text(json.dumps(data, indent=1))
    (out / "soak.md").write_text(text + "\n")
    return text


def parse_args(argv: list[str] | None = None) -> tuple[SoakSetting, Path]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0],
                                     epilog="Flags not listed here are passed to app.py.")
    d = SoakSetting()
    parser.add_argument("--model", default=d.model)
    parser.add_argument("--minutes", type=int, default=d.minutes)
    parser.add_argument("--warmup-minutes", type=int, default=d.warmup_minutes)
    parser.add_argument("--busy", type=float, default=d.busy_s, help="seconds of load in each minute")
    parser.add_argument("--firers", type=int, default=d.firers)
    parser.add_argument("--api-streams", type=int, default=d.api_streams)
    parser.add_argument("--viewers", type=int, default=d.viewers, help="viewers coming and going")
    parser.add_argument("--compare-every", type=int, default=d.compare_every, help="minutes")
    parser.add_argument("--record-every", type=int, default=d.record_every, help="minutes")
    parser.add_argument("--bound-mib", type=float, default=d.bound_mib)
    parser.add_argument("--out", type=Path, default=OUT)
    args, app_flags = parser.parse_known_args(argv)
    if args.minutes < 1 or args.compare_every < 1 or args.record_every < 1:
        parser.error("--minutes, --compare-every and --record-every must be at least 1")
    return SoakSetting(args.model, args.minutes, args.warmup_minutes, args.busy, args.firers, args.api_streams,
                       args.viewers, args.compare_every, args.record_every, args.bound_mib, tuple(app_flags)), args.out


def main(argv: list[str] | None = None) -> None:
    setting, out = parse_args(argv)
    out.mkdir(parents=True, exist_ok=True)
    exit_on_sigterm()
    server = start_app(setting.model, setting.app_flags, out / "soak-server.log")
    try:
        wait_ready("batchscope", server)
        print(f"app.py ready at {server.url}; {setting.minutes} minutes", flush=True)
        samples, tally = asyncio.run(session(setting, server))
    finally:
        server.stop()
    print(report(setting, samples, tally, out))
    print(f"\nresults: {out / 'soak.json'} and .md", flush=True)


if __name__ == "__main__":
    random.seed(0)
    with contextlib.suppress(KeyboardInterrupt):
        main()
