"""A full room: does the dashboard hold N viewers and M firing visitors without slowing the engine?

    python -m benchmarks.room [--viewers 500] [--firers 50] [--api-streams 12] [--model default]
                              [--window 10] [--rounds 3] [--no-deflate] [other app.py flags]

Design. The real ``app.py`` runs as a subprocess on a free loopback port (flags this script
does not know go to it; API limits are raised so that one client's K streams are not throttled).
Three kinds of load, each in the place that keeps the measurements apart:

- viewers: ONE light process (benchmarks/room_client.py: asyncio + ``websockets``) holds every
  /ws/telemetry connection, each with a fresh ``bs_visitor`` cookie, and parses every message;
  its CPU time (/proc) is reported as the cores the viewers took;
- firers: M visitors, each with its own cookie, click Fire through the page's own Gradio
  endpoint (api_name "fire") at a steady rate (benchmarks/room_load.py), here in this process;
- K API streams (/v1/completions, stream=True) keep the engine busy, here too.

Windows alternate: 1 viewer, N viewers, 1 viewer, ..., 1 viewer (``--rounds`` N windows, each
between two 1-viewer windows), viewers connected (each got its snapshot) and settled before a
window starts. Engine steps/s and generated tok/s come from /metrics (serve/metrics.py: the
``batchscope_iterations`` and ``batchscope_generation_tokens`` counters), read at both ends of
each window: exact, whereas frames may leave records out. Frame rates, lags and resyncs per
viewer come from the client; first-token times from the click (this process's wall clock) to
the first token's event time (the server's, same host) as viewer 0 saw it. Server RSS
(/proc VmRSS) is read once the model is loaded and again after the last window. Each window
also notes this process's CPU time (the load) and the rest of the host's busy CPU time (/proc/stat:
other work, time the hypervisor stole): a ratio measured on a host busy elsewhere says so there.

Results: a table (room_summary.py) printed and written as Markdown, and everything as JSON, in
benchmarks/results/room/ (git-ignored), with the server's and the client's logs. Numbers are
measured, never asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from benchmarks.room_load import ApiStreams, Firers, FireSetting, cancel
from benchmarks.room_summary import JOIN, MANY, ONE, Window, metric_value, summarize, table
from benchmarks.serving import exit_on_sigterm, launch, wait_ready
from benchmarks.vllm_tap_cost import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "room"
STEPS, TOKENS = "batchscope_iterations_total", "batchscope_generation_tokens_total"
DRAIN_S = 3.0  # after the load stops: the last clicks' first tokens still reach viewer 0


@dataclass(frozen=True)
class RoomSetting:
    model: str = "default"
    viewers: int = 500
    firers: int = 50
    api_streams: int = 12
    api_max_tokens: int = 64
    window_s: float = 10.0
    rounds: int = 3
    warmup_s: float = 5.0
    settle_s: float = 1.0
    deflate: bool = True
    fire: FireSetting = field(default_factory=FireSetting)
    app_flags: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"room-{self.viewers}v-{self.firers}f" + ("" if self.deflate else "-nodeflate")


def start_app(model: str, app_flags: tuple[str, ...], log: Path) -> launch.Server:
    """The real app.py on a free loopback port, API limits raised for one client's streams."""
    port = launch.free_port()
    command = [sys.executable, str(ROOT / "app.py"), "--model", model, "--host", "127.0.0.1",
               "--port", str(port), "--api-max-concurrent-per-client", "4096",
               "--api-max-waiting", "4096", *app_flags]
    return launch.start(command, port, log)


def host_busy_seconds() -> float:
    """Busy CPU time of the whole host so far, all cores, stolen time included (/proc/stat:
    user nice system idle iowait irq softirq steal ...)."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def proc_status_field(pid: int, key: str) -> int:
    """A number of /proc/<pid>/status (memory lines in kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def proc_status_mib(pid: int, key: str = "VmRSS") -> float:
    """A memory line of /proc/<pid>/status, in MiB."""
    return proc_status_field(pid, key) / 1024


@dataclass
class ViewerClient:
    """The viewers' process (room_client.py), driven one JSON line at a time."""

    process: asyncio.subprocess.Process

    @classmethod
    async def start(cls, url: str, deflate: bool, log: Path) -> ViewerClient:
        flags = [] if deflate else ["--no-deflate"]
        with log.open("w") as sink:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "benchmarks.room_client", url, *flags, cwd=ROOT,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=sink, limit=1 << 28)
        return cls(process)

    @property
    def pid(self) -> int:
        return self.process.pid

    async def ask(self, command: dict, timeout: float = 300.0) -> dict:
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        await self.process.stdin.drain()
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not line:
            raise RuntimeError(f"the viewers' client exited ({await self.process.wait()})")
        return json.loads(line)

    async def finish(self) -> None:
        if self.process.returncode is None:
            self.process.stdin.close()
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


@dataclass
class Probe:
    """Reads the engine's counters and both processes' CPU time at a window's two ends."""

    server: launch.Server
    client: ViewerClient
    http: httpx.AsyncClient

    async def sample(self) -> tuple[float, ...]:
        metrics = (await self.http.get("/metrics")).text
        return (time.time(), metric_value(metrics, STEPS), metric_value(metrics, TOKENS),
                cpu_seconds(self.server.process.pid), cpu_seconds(self.client.pid), time.process_time(),
                host_busy_seconds())

    async def window(self, kind: str, seconds: float) -> Window:
        return (await self.during(kind, asyncio.sleep(seconds)))[0]

    async def during(self, kind: str, work: Awaitable) -> tuple[Window, object]:
        """The counters over ``work`` (a window's sleep, or viewers joining), and its result."""
        start = await self.sample()
        result = await work
        end = await self.sample()
        steps, tokens, server, client, load, host = (b - a for a, b in zip(start[1:], end[1:], strict=True))
        return Window(kind, start[0], end[0], steps, tokens, server, client, load, host - server - client - load), result


async def measure(setting: RoomSetting, probe: Probe) -> tuple[list[Window], list[Window]]:
    """1, N, 1, N, ..., 1 viewers: every N window between two 1-viewer windows."""
    windows, joins = [], []
    for kind in [ONE, MANY] * setting.rounds + [ONE]:
        wanted = setting.viewers if kind == MANY else 1
        join, ready = await probe.during(JOIN, probe.client.ask({"viewers": wanted}))
        if kind == MANY:
            joins.append(join)
            print(f"  {wanted} viewers joined in {join.seconds:.1f} s ({join.rate('tokens'):.1f} tok/s meanwhile)", flush=True)
        if ready["failed"]:
            print(f"  {ready['failed']} of {wanted} viewers did not connect: {ready['errors']}", flush=True)
        await asyncio.sleep(setting.settle_s)
        window = await probe.window(kind, setting.window_s)
        windows.append(window)
        print(f"  {wanted:4d} viewer(s): {window.rate('steps'):7.1f} steps/s, {window.rate('tokens'):7.1f} tok/s, "
              f"server {window.rate('server_cpu_s'):.2f} cores, client {window.rate('client_cpu_s'):.2f} cores, "
              f"load {window.rate('load_cpu_s'):.2f} cores, other {window.rate('other_cpu_s'):.2f} cores", flush=True)
    return windows, joins


async def session(setting: RoomSetting, server: launch.Server, out: Path) -> dict:
    """Viewers, firers and API streams against the running server; the raw results."""
    client = await ViewerClient.start(server.url, setting.deflate, out / f"{setting.name}-client.log")
    firers = Firers(server.url, setting.fire, setting.firers)
    api = ApiStreams(server.url, setting.api_streams, setting.api_max_tokens)
    rss_start = proc_status_mib(server.process.pid)
    load = [asyncio.create_task(api.run()), asyncio.create_task(firers.run())]
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            await client.ask({"viewers": 1})
            await asyncio.sleep(setting.warmup_s)
            windows, joins = await measure(setting, Probe(server, client, http))
        rss_end = proc_status_mib(server.process.pid)
    finally:
        await cancel(*load)
    await asyncio.sleep(DRAIN_S)
    try:
        viewers = await client.ask({"summary": [[w.kind, w.t0, w.t1] for w in windows]})
        process = {"client_cpu_s": cpu_seconds(client.pid), "client_peak_rss_mib": proc_status_mib(client.pid, "VmHWM"),
                   "server_rss_mib": {"start": rss_start, "end": rss_end}}
    finally:
        await client.finish()
    return {"windows": windows, "joins": joins, "viewers": viewers, "clicks": firers.clicks, "process": process,
            "api": {"streams_completed": api.completed, "chunks": api.chunks, "errors": len(api.errors)},
            "fire": {"errors": len(firers.errors)},
            "error_samples": {"fire": firers.errors[:20], "api": api.errors[:20]}}


def report(setting: RoomSetting, raw: dict, out: Path) -> str:
    """Write the JSON and the Markdown; return the Markdown."""
    summary = summarize(raw["windows"], raw["viewers"], raw["clicks"])
    p, clicks = raw["process"], summary["clicks"]
    run_s = sum(w.seconds for w in raw["windows"])
    text = "\n".join([
        f"Room: {setting.viewers} viewers ({'messages deflated once for all' if setting.deflate else 'text messages'}), "
        f"{setting.firers} firers (preset {setting.fire.preset}, {setting.fire.count} x {setting.fire.max_tokens} "
        f"tokens every {setting.fire.every_s:g} s each), {setting.api_streams} API streams; model "
        f"{setting.model}; {len(raw['windows'])} windows of {setting.window_s:g} s (medians over windows).", "",
        table(summary, setting.viewers), "",
        join_line(raw["joins"], summary, setting.viewers),
        f"- server RSS: {p['server_rss_mib']['start']:.0f} MiB at start, {p['server_rss_mib']['end']:.0f} MiB at end",
        f"- viewers' client: {p['client_cpu_s']:.1f} CPU-s in all, peak RSS {p['client_peak_rss_mib']:.0f} MiB "
        f"({raw['viewers']['viewers_opened']} connections, {raw['viewers']['viewers_failed']} failed; "
        f"extensions negotiated: {', '.join(raw['viewers']['extensions']) or 'none'})",
        f"- clicks: {clicks['clicks']} ({clicks['fired']} fired, {clicks['refused']} refused, "
        f"{clicks['first_token_unseen']} first tokens unseen, {raw['fire']['errors']} errors)",
        f"- API streams: {raw['api']['streams_completed']} completed, {raw['api']['errors']} errors; "
        f"measured {run_s:.0f} s"])
    out.mkdir(parents=True, exist_ok=True)
    data = {"setting": asdict(setting), **raw, "windows": [asdict(w) for w in raw["windows"]],
            "joins": [asdict(w) for w in raw["joins"]],
            "clicks": [asdict(c) for c in raw["clicks"]], "summary": summary}
    data["viewers"] = {k: v for k, v in raw["viewers"].items() if k != "first_tokens"}
    (out / f"{setting.name}.json").write_text(json.dumps(data, indent=1))
    (out / f"{setting.name}.md").write_text(text + "\n")
    return text


def join_line(joins: list[Window], summary: dict, viewers: int) -> str:
    """How long N viewers took to connect and get their snapshots, and the engine meanwhile."""
    seconds = sorted(w.seconds for w in joins)
    tokens = statistics.median(w.rate("tokens") for w in joins)
    one = summary["rates"]["tokens"][ONE]["median"]
    return (f"- joining: {viewers} viewers connected, each with its snapshot, in {statistics.median(seconds):.1f} s "
            f"(median, {seconds[0]:.1f}-{seconds[-1]:.1f}); the engine made {tokens:.0f} tok/s meanwhile "
            f"({tokens / one:.2f}x the one-viewer windows)")


def parse_args(argv: list[str] | None = None) -> tuple[RoomSetting, Path]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.room", description=__doc__.splitlines()[0],
                                     epilog="Flags not listed here are passed to app.py.")
    d, f = RoomSetting(), FireSetting()
    parser.add_argument("--model", default=d.model)
    parser.add_argument("--viewers", type=int, default=d.viewers, help="viewers in the N windows")
    parser.add_argument("--firers", type=int, default=d.firers, help="visitors clicking Fire")
    parser.add_argument("--api-streams", type=int, default=d.api_streams)
    parser.add_argument("--api-max-tokens", type=int, default=d.api_max_tokens)
    parser.add_argument("--window", type=float, default=d.window_s, help="seconds per window")
    parser.add_argument("--rounds", type=int, default=d.rounds, help="N-viewer windows")
    parser.add_argument("--warmup", type=float, default=d.warmup_s)
    parser.add_argument("--settle", type=float, default=d.settle_s, help="seconds after (dis)connecting")
    parser.add_argument("--no-deflate", action="store_true", help="viewers ask for text messages, not deflate-raw")
    parser.add_argument("--preset", default=f.preset)
    parser.add_argument("--fire-count", type=int, default=f.count, help="requests per click")
    parser.add_argument("--fire-max-tokens", type=int, default=f.max_tokens)
    parser.add_argument("--fire-every", type=float, default=f.every_s, help="seconds between a firer's clicks")
    parser.add_argument("--out", type=Path, default=OUT)
    args, app_flags = parser.parse_known_args(argv)
    fire = FireSetting(args.preset, args.fire_count, args.fire_max_tokens, f.temperature, f.spacing_ms,
                       args.fire_every)
    return RoomSetting(args.model, args.viewers, args.firers, args.api_streams, args.api_max_tokens, args.window,
                       args.rounds, args.warmup, args.settle, not args.no_deflate, fire, tuple(app_flags)), args.out


def main(argv: list[str] | None = None) -> None:
    setting, out = parse_args(argv)
    out.mkdir(parents=True, exist_ok=True)
    exit_on_sigterm()
    server = start_app(setting.model, setting.app_flags, out / f"{setting.name}-server.log")
    try:
        wait_ready("batchscope", server)
        print(f"app.py ready at {server.url}; {setting.name}", flush=True)
        raw = asyncio.run(session(setting, server, out))
    finally:
        server.stop()
    print(report(setting, raw, out))
    print(f"\nresults: {out / setting.name}.json and .md", flush=True)


if __name__ == "__main__":
    main()
