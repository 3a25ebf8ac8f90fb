"""ReplaySource: a recorded trace as a RecordSource (engine/record_source.py), played by a
ReplayPlayer, so the hub and the views take a replay exactly as they take a live engine.

Beyond the protocol it has ``subscribe_restarts``: a seek backwards starts the stream over
(the hub forgets what it had; viewers resync). ``status()`` adds the playback (``replay``:
trace, iteration, speed, playing, the steps the recording lost) and ``counts()`` are the
waiting and running requests of the iteration on screen, as its cards show them
(engine/request_states.py). Callbacks run on the player's thread or a
control's, under the player's lock: they must only hand data off, as with an engine.
"""
from __future__ import annotations

from collections.abc import Callable

from engine.record_source import SourceInfo
from engine.request_states import RequestStates
from engine.telemetry import upgrade_record

from ..traces.player import PlayerState, ReplayPlayer
from ..traces.trace import Trace, TraceEntry, trace_phases


class Listeners:
    """Callbacks replaced, never mutated, so they are called without a lock."""

    def __init__(self):
        self.callbacks: tuple[Callable, ...] = ()

    def add(self, callback: Callable) -> Callable[[], None]:
        self.callbacks = (*self.callbacks, callback)

        def remove() -> None:
            self.callbacks = tuple(c for c in self.callbacks if c is not callback)
        return remove

    def __call__(self, *args) -> None:
        for callback in self.callbacks:
            callback(*args)


class ReplaySource:
    def __init__(self, trace: Trace, name: str):
        self.trace = trace
        self.name = name
        self._records, self._events, self._restarts = Listeners(), Listeners(), Listeners()
        self._states = RequestStates()  # (the one reducer of request states: request_states.py)
        self.player = ReplayPlayer(trace, self._publish, self._restart, on_state=self._remember)
        self._state = self.player.state
        self._info = trace_info(trace)

    # ---- RecordSource ----------------------------------------------------------------------
    def subscribe(self, on_record: Callable[[dict], None]) -> Callable[[], None]:
        return self._records.add(on_record)

    def subscribe_events(self, on_event: Callable[[dict], None]) -> Callable[[], None]:
        return self._events.add(on_event)

    def subscribe_restarts(self, on_restart: Callable[[], None]) -> Callable[[], None]:
        return self._restarts.add(on_restart)

    def info(self) -> SourceInfo:
        return self._info

    def status(self) -> dict:
        state = self._state
        return {"state": "ready", "error": None, "paused": not state.playing,
                "load_seconds": None,
                "replay": {"trace": self.name, "iteration": state.iteration,
                           "num_iterations": state.num_iterations, "step": state.step,
                           "speed": state.speed, "playing": state.playing,
                           "gaps": self.trace.lost_steps}}

    def counts(self) -> dict[str, int]:
        return self._states.counts()

    def close(self) -> None:
        self.player.close()

    # ---- the player's callbacks ------------------------------------------------------------
    def _publish(self, entry: TraceEntry) -> None:
        if entry.kind == "record":
            data = upgrade_record(entry.data)  # a schema-1 trace replays as schema 2
            self._states.on_record(data)
            self._records(data)
        elif entry.kind == "event":
            self._states.on_event(entry.data)
            self._events(entry.data)
        # a gap has nothing to show but its place: status.replay.gaps lists them

    def _restart(self) -> None:
        self._states.clear()
        self._restarts()

    def _remember(self, state: PlayerState) -> None:
        self._state = state  # read by the status line without taking the player's lock


def trace_info(trace: Trace) -> SourceInfo:
    """What the trace's engine was, from its header and its first record's ``source``."""
    header, records = trace.header, trace.records
    source = upgrade_record(records[0])["source"] if records else {}
    engine = header["engine"]
    return SourceInfo(
        engine=source.get("engine", "batchscope"), engine_version=source.get("version", ""),
        model=header["model"]["name"], phases=tuple(trace_phases(trace)),
        block_size=engine.get("block_size"), num_kv_blocks=engine.get("num_kv_blocks"),
        max_model_len=engine.get("max_model_len"),
        trace_header={k: header[k] for k in ("model", "engine", "hardware")})
