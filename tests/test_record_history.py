"""RecordHistory: back to the oldest arrival on screen, never less than ``keep``, bounded in bytes."""
from __future__ import annotations

from viz.live.frames import RecordBody
from viz.live.history import RecordHistory


def add(history: RecordHistory, steps: range) -> None:
    records = [{"step": s, "t_end": float(s), "pad": "x" * 100} for s in steps]
    history.extend(records, [RecordBody.of(r) for r in records])


def steps(history: RecordHistory) -> list[int]:
    return [r["step"] for r in history.items()[0]]


def test_records_since_the_oldest_arrival_on_screen_are_kept():
    history = RecordHistory(keep=3)
    add(history, range(10))
    history.trim(since=4.0)
    assert steps(history) == [4, 5, 6, 7, 8, 9]
    history.trim(since=None)  # nothing on screen: the latest ``keep``
    assert steps(history) == [7, 8, 9]


def test_the_bytes_bound_wins_over_an_old_arrival_but_never_below_keep():
    size = len(RecordBody.of({"step": 10, "t_end": 10.0, "pad": "x" * 100}).members)  # steps 10-19 alike
    history = RecordHistory(keep=2, max_bytes=5 * size)
    add(history, range(10, 20))
    history.trim(since=0.0)
    assert steps(history) == list(range(15, 20))
    history = RecordHistory(keep=4, max_bytes=1)
    add(history, range(10))
    history.trim(since=0.0)
    assert steps(history) == [6, 7, 8, 9]
