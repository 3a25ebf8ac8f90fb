"""The pure half of the room benchmark (benchmarks/room.py): from what was measured to numbers.

No I/O and nothing beyond the standard library, so the viewers' client process
(benchmarks/room_client.py) imports it without weight and tests check it on made-up data.

- Windows alternate, 1 viewer then N viewers then 1 ... then 1: every N window is compared with
  the mean of the 1-viewer windows on either side of it, so a load that drifts over the run
  cancels out; the ratios' median is the headline and their min-max its spread.
- Lags: record ``t_end`` (the engine's wall clock) to the wall-clock time a viewer received the
  frame holding it; server and client share the host, so they share the clock.
- Frames per viewer per second: whole seconds of a window, counted for every viewer connected
  through the whole window; a second with no frame at all is a viewer starved.
- First tokens: per visitor (firer) the median time from a click to the first token of the
  click's first request; their median over visitors, and the slowest visitor's over it.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from viz.ui.strings import unmarked

ONE, MANY = "1", "N"  # window kinds: one viewer, N viewers
JOIN = "join"  # N viewers connecting, each until its snapshot (room.py notes it apart)


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float


def spread(values: Iterable[float]) -> Spread | None:
    values = list(values)
    return Spread(statistics.median(values), min(values), max(values)) if values else None


@dataclass(frozen=True)
class Window:
    """One measurement window: engine counters (from /metrics) and CPU seconds over it."""

    kind: str
    t0: float
    t1: float
    steps: float
    tokens: float
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    load_cpu_s: float = 0.0  # room.py itself: the firers and the API streams
    other_cpu_s: float = 0.0  # the rest of the host's busy CPU time (other work, the hypervisor's steal)

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    def rate(self, name: str) -> float:
        """``steps``, ``tokens`` or one of the ``*_cpu_s`` per second."""
        return getattr(self, name) / self.seconds


def rates_by_kind(windows: Sequence[Window], name: str) -> dict[str, Spread | None]:
    return {kind: spread(w.rate(name) for w in windows if w.kind == kind) for kind in (ONE, MANY)}


def alternating_ratios(windows: Sequence[Window], name: str) -> Spread | None:
    """Each N window's rate over the mean rate of its neighbouring 1-viewer windows."""
    ratios = []
    for i, window in enumerate(windows):
        if window.kind != MANY:
            continue
        near = [windows[j] for j in (i - 1, i + 1) if 0 <= j < len(windows) and windows[j].kind == ONE]
        base = statistics.fmean(w.rate(name) for w in near) if near else 0.0
        if base > 0:
            ratios.append(window.rate(name) / base)
    return spread(ratios)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100), linear between the nearest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def lag_percentiles(lags_s: Sequence[float]) -> dict:
    """p50 and p99 of record-to-viewer lags, in milliseconds."""
    p50, p99 = percentile(lags_s, 50), percentile(lags_s, 99)
    return {"n": len(lags_s), "p50_ms": None if p50 is None else p50 * 1e3,
            "p99_ms": None if p99 is None else p99 * 1e3}


def per_second_counts(times: Iterable[float], t0: float, t1: float) -> list[int]:
    """Messages in each whole second of [t0, t1) (a last partial second is left out)."""
    counts = [0] * int(t1 - t0)
    for t in times:
        second = math.floor(t - t0)
        if 0 <= second < len(counts):
            counts[second] += 1
    return counts


@dataclass(frozen=True)
class FrameRates:
    """Frames per viewer per second over every (viewer, second) of some windows."""

    viewers: int  # viewer-windows, strictly: a viewer in two windows counts twice
    viewer_seconds: int
    min: int
    median: float
    max: int
    empty_seconds: int  # seconds in which a viewer got no frame
    starved_viewers: int  # viewer-windows with at least one such second


def frame_rates(per_viewer: Sequence[Sequence[int]]) -> FrameRates | None:
    counts = [c for seconds in per_viewer for c in seconds]
    if not counts:
        return None
    return FrameRates(len(per_viewer), len(counts), min(counts), statistics.median(counts), max(counts),
                      counts.count(0), sum(1 for seconds in per_viewer if 0 in seconds))


@dataclass(frozen=True)
class Click:
    """One Fire click: who, when (wall clock), the first request it fired, or why none."""

    firer: int
    t_click: float
    request_id: str | None = None
    refused: str | None = None


def first_token_times(clicks: Iterable[Click], first_tokens: dict[str, float]) -> dict[int, list[float]]:
    """Per firer, the seconds from each click to its first request's first token (clicks whose
    first token was never seen are left out)."""
    times: dict[int, list[float]] = {}
    for click in clicks:
        if click.request_id is not None and click.request_id in first_tokens:
            times.setdefault(click.firer, []).append(first_tokens[click.request_id] - click.t_click)
    return times


@dataclass(frozen=True)
class FirstTokenSpread:
    visitors: int
    clicks: int
    median_s: float  # the median over visitors of each visitor's median
    max_s: float  # the slowest visitor's median
    max_over_median: float


def first_token_spread(per_firer: dict[int, list[float]]) -> FirstTokenSpread | None:
    medians = [statistics.median(times) for times in per_firer.values() if times]
    if not medians:
        return None
    middle = statistics.median(medians)
    return FirstTokenSpread(len(medians), sum(len(t) for t in per_firer.values()), middle, max(medians),
                            max(medians) / middle if middle > 0 else math.inf)


def in_windows(clicks: Iterable[Click], windows: Sequence[Window], kind: str) -> list[Click]:
    spans = [(w.t0, w.t1) for w in windows if w.kind == kind]
    return [c for c in clicks if any(t0 <= c.t_click < t1 for t0, t1 in spans)]


def first_tokens_by_kind(clicks: Sequence[Click], windows: Sequence[Window],
                         first_tokens: dict[str, float]) -> dict[str, dict | None]:
    """First-token spread of the clicks made in each kind of window, and of all of them."""
    groups = {ONE: in_windows(clicks, windows, ONE), MANY: in_windows(clicks, windows, MANY), "all": clicks}
    out = {}
    for kind, group in groups.items():
        found = first_token_spread(first_token_times(group, first_tokens))
        out[kind] = asdict(found) if found else None
    return out


def metric_value(exposition: str, name: str) -> float:
    """A sample's value in Prometheus text (0 when absent)."""
    for line in exposition.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def fired_ids(status: str) -> list[str]:
    """The request ids in the Fire button's answer, "Fired 2: q1, q2 · ..." ([] when refused)."""
    english = unmarked(status).split(" · ")[0]
    if not english.startswith("Fired"):
        return []
    return [rid.strip() for rid in english.split(": ", 1)[1].split(",") if rid.strip()]


def _plain(value: Spread | None) -> dict | None:
    return asdict(value) if value else None


def click_counts(clicks: Sequence[Click], first_tokens: dict[str, float]) -> dict:
    fired = [c for c in clicks if c.request_id is not None]
    return {"clicks": len(clicks), "fired": len(fired), "refused": len(clicks) - len(fired),
            "first_token_unseen": sum(1 for c in fired if c.request_id not in first_tokens)}


def summarize(windows: Sequence[Window], viewers: dict, clicks: Sequence[Click]) -> dict:
    """Everything the table shows, JSON-ready. ``viewers``: the viewers' client's summary
    (room_client.py: ``kinds`` -> frames_per_s, lag, resyncs; ``first_tokens``)."""
    rates = {name: {kind: _plain(s) for kind, s in rates_by_kind(windows, name).items()}
             for name in ("steps", "tokens", "server_cpu_s", "client_cpu_s", "load_cpu_s", "other_cpu_s")}
    return {
        "rates": rates,
        "ratios": {name: _plain(alternating_ratios(windows, name)) for name in ("steps", "tokens")},
        "viewers": {kind: viewers["kinds"].get(kind) for kind in (ONE, MANY)},
        "first_token": first_tokens_by_kind(clicks, windows, viewers["first_tokens"]),
        "clicks": click_counts(clicks, viewers["first_tokens"]),
    }


def _cell(value: float | None, form: str = ".1f") -> str:
    return "n/a" if value is None else format(value, form)


def _rate_row(label: str, by_kind: dict, ratio: dict | None = None, form: str = ".1f") -> str:
    cells = [_cell(by_kind[kind]["median"] if by_kind[kind] else None, form) for kind in (ONE, MANY)]
    shown = f"{ratio['median']:.3f} ({ratio['low']:.3f}-{ratio['high']:.3f})" if ratio else ""
    return f"| {label} | {cells[0]} | {cells[1]} | {shown} |"


def _viewer_cells(viewers: dict | None) -> tuple[str, str, str, str]:
    """frames/s min/median/max, seconds without a frame, resyncs, lag p50/p99."""
    if not viewers or not viewers.get("frames_per_s"):
        return "n/a", "n/a", "n/a", "n/a"
    f, lag = viewers["frames_per_s"], viewers["lag"]
    return (f"{f['min']} / {f['median']:g} / {f['max']}",
            f"{f['empty_seconds']} of {f['viewer_seconds']} ({f['starved_viewers']} viewers)",
            str(viewers["resyncs"]), f"{_cell(lag['p50_ms'], '.0f')} / {_cell(lag['p99_ms'], '.0f')}")


def _first_token_cell(spread_: dict | None) -> str:
    if not spread_:
        return "n/a"
    return f"{spread_['median_s']:.2f} s, {spread_['max_over_median']:.2f}x ({spread_['visitors']} visitors)"


def table(summary: dict, viewers: int) -> str:
    """The Markdown table of one run (medians over windows; N / 1: paired ratios, min-max)."""
    rates, ratios = summary["rates"], summary["ratios"]
    one, many = (_viewer_cells(summary["viewers"][kind]) for kind in (ONE, MANY))
    first = summary["first_token"]
    rows = [f"| | 1 viewer | {viewers} viewers | N / 1: median (min-max) |", "|---|---|---|---|",
            _rate_row("engine steps/s (/metrics)", rates["steps"], ratios["steps"]),
            _rate_row("generated tok/s (/metrics)", rates["tokens"], ratios["tokens"]),
            _rate_row("server CPU, cores", rates["server_cpu_s"], form=".2f"),
            _rate_row("viewers' client CPU, cores", rates["client_cpu_s"], form=".2f"),
            _rate_row("load generator CPU (firers, API streams), cores", rates["load_cpu_s"], form=".2f"),
            _rate_row("other CPU busy on the host, cores", rates["other_cpu_s"], form=".2f"),
            f"| frames per viewer per s: min / median / max | {one[0]} | {many[0]} | |",
            f"| viewer-seconds without a frame | {one[1]} | {many[1]} | |",
            f"| resyncs (snapshots after lost frames) | {one[2]} | {many[2]} | |",
            f"| record-to-viewer lag p50 / p99, ms | {one[3]} | {many[3]} | |",
            f"| first token after a click: median, max/median | {_first_token_cell(first[ONE])} | "
            f"{_first_token_cell(first[MANY])} | all: {_first_token_cell(first['all'])} |"]
    return "\n".join(rows)
