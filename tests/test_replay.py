"""ReplayPlayer: stepping, seeking and timed playback publish exactly the recorded entries."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from viz.traces.player import MAX_GAP_S, ReplayPlayer
from viz.traces.trace import Trace, TraceEntry, load_trace

SHIPPED = sorted((Path(__file__).resolve().parent.parent / "assets" / "traces").glob("*.jsonl*"))


@pytest.fixture(scope="module")
def shipped() -> Trace:
    assert SHIPPED, "assets/traces/ holds no trace"
    return load_trace(SHIPPED[0])


def fast_copy(trace: Trace, num_records: int, gap: float) -> Trace:
    """The first ``num_records`` records (and their events), re-timed ``gap`` seconds apart."""
    entries, records = [], 0
    for i, entry in enumerate(trace.entries):
        if entry.kind == "record":
            if records == num_records:
                break
            records += 1
        stamp = {"t_end": i * gap} if entry.kind == "record" else {"time": i * gap}
        entries.append(TraceEntry(entry.kind, {**entry.data, **stamp}))
    return Trace(trace.header, entries)


class Viewer:
    """Stands in for the hub: what was published since the last reset."""

    def __init__(self):
        self.entries: list[TraceEntry] = []
        self.resets = 0
        self.done = threading.Event()

    def publish(self, entry: TraceEntry) -> None:
        self.entries.append(entry)

    def reset(self) -> None:
        self.entries.clear()
        self.resets += 1

    def steps(self) -> list[int]:
        return [e.data["step"] for e in self.entries if e.kind == "record"]


def prefix_through(trace: Trace, iteration: int) -> list[TraceEntry]:
    positions = [i for i, e in enumerate(trace.entries) if e.kind == "record"]
    return trace.entries[: positions[iteration] + 1]


def test_step_and_seek_show_the_recorded_state(shipped):
    viewer = Viewer()
    player = ReplayPlayer(shipped, viewer.publish, viewer.reset)
    try:
        assert player.state.iteration == -1 and viewer.entries == []
        player.step()
        player.step()
        assert player.state.iteration == 1
        assert viewer.entries == prefix_through(shipped, 1)
        assert viewer.resets == 0
        player.seek(120)  # a jump: start over, then republish without delays
        assert viewer.entries == prefix_through(shipped, 120) and viewer.resets == 1
        player.seek(40)
        assert viewer.resets == 2
        assert viewer.entries == prefix_through(shipped, 40)
        assert player.state.step == shipped.records[40]["step"]
        player.seek(10**6)
        assert player.state.iteration == len(shipped.records) - 1
        assert viewer.entries == shipped.entries[: len(viewer.entries)]
        player.step()  # at the end: nothing changes, no resync
        assert viewer.resets == 3 and player.state.iteration == len(shipped.records) - 1
    finally:
        player.close()


def test_play_honours_recorded_gaps_scaled_by_speed(shipped):
    trace = fast_copy(shipped, num_records=6, gap=0.02)
    viewer = Viewer()
    states = []
    player = ReplayPlayer(trace, viewer.publish, viewer.reset, on_state=states.append)
    try:
        player.set_speed(0.5)
        player.play()
        assert _wait(lambda: not player.state.playing and player.state.iteration == 5, 10)
        assert viewer.entries == trace.entries
        assert states[-1].iteration == 5 and not states[-1].playing
        player.play()  # at the end, play starts over
        assert viewer.resets == 1
        player.pause()
        assert not player.state.playing
    finally:
        player.close()


def test_play_waits_between_entries(shipped):
    trace = fast_copy(shipped, num_records=3, gap=0.3)
    viewer = Viewer()
    player = ReplayPlayer(trace, viewer.publish, viewer.reset)
    try:
        player.set_speed(8.0)
        player.play()
        assert _wait(lambda: len(viewer.entries) == len(trace.entries), 10)
        player.set_speed(0.25)
        player.seek(-1)
        player.play()
        assert _wait(lambda: len(viewer.entries) >= 1, 5)
        assert len(viewer.entries) < 3  # 0.3 s gaps at 0.25x: 1.2 s before the next entry
    finally:
        player.close()


def test_long_idle_gaps_are_shortened(shipped):
    trace = fast_copy(shipped, num_records=2, gap=0.0)
    last = trace.entries[-1]
    trace.entries[-1] = TraceEntry(last.kind, {**last.data, "t_end": 3600.0})  # an hour idle
    viewer = Viewer()
    player = ReplayPlayer(trace, viewer.publish)
    try:
        player.set_speed(8.0)
        player.play()
        assert _wait(lambda: len(viewer.entries) == len(trace.entries), 4 * MAX_GAP_S / 8 + 1)
    finally:
        player.close()


def test_an_empty_trace_plays_nothing(shipped):
    viewer = Viewer()
    player = ReplayPlayer(Trace(shipped.header, []), viewer.publish, viewer.reset)
    try:
        player.play()
        player.step()
        player.seek(5)
        assert viewer.entries == [] and player.state.iteration == -1
        assert not player.state.playing and player.state.num_iterations == 0
    finally:
        player.close()


@pytest.mark.parametrize("speed", [0.1, 9, 0])
def test_speed_range(shipped, speed):
    player = ReplayPlayer(shipped, lambda e: None)
    try:
        with pytest.raises(ValueError, match="speed"):
            player.set_speed(speed)
    finally:
        player.close()


def _wait(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
