"""TraceTotals: a whole recorded trace as a finished RecordSource, for /metrics in replay mode.

A replay plays a trace per viewer, so no one playback is "the server's". What monitoring can ask
of a replay is what the trace holds: every record and event is handed to a subscriber as it
subscribes, so metrics built on it (serve/metrics.py) count the whole run, and ``counts()`` are
those of a run that ended (nothing waiting or running).
"""
from __future__ import annotations

from collections.abc import Callable

from engine.telemetry import upgrade_record

from ..traces.trace import Trace


class TraceTotals:
    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def subscribe(self, on_record: Callable[[dict], None]) -> Callable[[], None]:
        for record in self._trace.records:
            on_record(upgrade_record(record))
        return lambda: None

    def subscribe_events(self, on_event: Callable[[dict], None]) -> Callable[[], None]:
        for event in self._trace.events:
            on_event(event)
        return lambda: None

    def counts(self) -> dict[str, int]:
        return {"waiting": 0, "running": 0}
