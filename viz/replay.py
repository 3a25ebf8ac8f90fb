"""ReplayPlayer: plays a recorded trace into the live viewers' publish path.

Records and events are published in their recorded order, each after the recorded gap since
the previous one divided by the speed; gaps longer than ``MAX_GAP_S`` (idle time between
workloads) are shortened to it so a presentation never stalls. The position is an iteration
(the index of the last published record). Stepping publishes everything up to the next record;
seeking elsewhere calls ``reset`` and republishes the trace from the start without delays, so
the viewers resync (a hub sends them a snapshot rather than a burst of frames) and end up in
exactly the state they had live at that iteration.
"""
from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from .colors import view_meta
from .trace import Trace, TraceEntry, trace_phases

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # the replay bar's choices
MIN_SPEED, MAX_SPEED = SPEEDS[0], SPEEDS[-1]
MAX_GAP_S = 2.0


@dataclass(frozen=True, slots=True)
class PlayerState:
    iteration: int  # index of the shown record; -1 before the first
    num_iterations: int
    step: int | None  # the shown record's engine step
    playing: bool
    speed: float


class ReplayPlayer:
    def __init__(self, trace: Trace, publish: Callable[[TraceEntry], None],
                 reset: Callable[[], None] = lambda: None,
                 on_state: Callable[[PlayerState], None] | None = None):
        """``publish`` and ``reset`` are called on the player's thread or the caller's, under
        the player's lock, so they must only hand off (like an engine subscriber)."""
        self.trace = trace
        self._entries = trace.entries
        self._record_positions = [i for i, e in enumerate(self._entries) if e.kind == "record"]
        self._publish = publish
        self._reset = reset
        self._on_state = on_state
        self._cursor = 0  # entries published so far
        self._playing = False
        self._speed = 1.0
        self._version = 0  # bumped by every control, so a pending wait starts over
        self._closed = False
        self._cond = threading.Condition(threading.RLock())
        self._thread = threading.Thread(target=self._run, name="batchscope-replay", daemon=True)
        self._thread.start()

    # ---- controls (any thread) -----------------------------------------------------------
    def play(self) -> None:
        with self._cond:
            if not self._entries:
                return
            if self._cursor >= len(self._entries):
                self._rewind()
            self._control(playing=True)

    def pause(self) -> None:
        with self._cond:
            self._control(playing=False)

    def step(self) -> None:
        """Pause and show the next iteration."""
        with self._cond:
            self._playing = False
            self.seek(self._iteration() + 1)

    def seek(self, iteration: int) -> None:
        """Show ``iteration`` (clamped to the trace); keeps playing if it was."""
        with self._cond:
            last = len(self._record_positions) - 1
            iteration = max(-1, min(int(iteration), last))
            if not self._iteration() <= iteration <= self._iteration() + 1:
                self._rewind()
            target = self._record_positions[iteration] + 1 if iteration >= 0 else 0
            while self._cursor < target:
                self._publish_next()
            self._control()

    def set_speed(self, speed: float) -> None:
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ValueError(f"speed must be in [{MIN_SPEED}, {MAX_SPEED}], got {speed}")
        with self._cond:
            self._control(speed=float(speed))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    @property
    def state(self) -> PlayerState:
        with self._cond:
            iteration = self._iteration()
            step = self._entries[self._record_positions[iteration]].data["step"] if iteration >= 0 else None
            return PlayerState(iteration, len(self._record_positions), step, self._playing, self._speed)

    # ---- internals (under the lock) ------------------------------------------------------
    def _iteration(self) -> int:
        return bisect_right(self._record_positions, self._cursor - 1) - 1

    def _rewind(self) -> None:
        self._reset()
        self._cursor = 0

    def _publish_next(self) -> None:
        self._publish(self._entries[self._cursor])
        self._cursor += 1

    def _control(self, **changes) -> None:
        if "playing" in changes:
            self._playing = changes["playing"]
        if "speed" in changes:
            self._speed = changes["speed"]
        self._version += 1
        self._cond.notify_all()
        self._report()

    def _report(self) -> None:
        if self._on_state is not None:
            self._on_state(self.state)

    def _gap(self) -> float:
        if self._cursor == 0:
            return 0.0
        entries = self._entries
        gap = entries[self._cursor].time - entries[self._cursor - 1].time
        return min(max(gap, 0.0), MAX_GAP_S)

    def _run(self) -> None:
        with self._cond:
            while True:
                while not self._closed and not (self._playing and self._cursor < len(self._entries)):
                    self._cond.wait()
                if self._closed:
                    return
                version = self._version
                deadline = time.monotonic() + self._gap() / self._speed
                while (not self._closed and self._version == version
                       and (left := deadline - time.monotonic()) > 0):
                    self._cond.wait(left)
                if self._closed or self._version != version:
                    continue
                was_record = self._entries[self._cursor].kind == "record"
                self._publish_next()
                if self._cursor >= len(self._entries):
                    self._playing = False
                if was_record or not self._playing:
                    self._report()


class HubReplay:
    """A trace played into a TelemetryHub: the replay counterpart of ``hub.attach(llm)``.

    The hub should be ``public``: a trace holds only the text its recorder was allowed to
    keep, so every viewer reads all of it. The status line shows the replay's position, speed
    and play state, and the queue lengths of the shown iteration.
    """

    def __init__(self, trace: Trace, hub, name: str):
        self.hub = hub
        self.name = name
        self.model = trace.header["model"]["name"]
        self._counts = {"pending": 0, "waiting": 0, "running": 0}
        self.player = ReplayPlayer(trace, self._publish, self._reset, on_state=self._remember)
        self._state = self.player.state
        hub.set_status_provider(self.status)
        hub.set_meta_provider(lambda: trace_meta(trace))

    def _publish(self, entry: TraceEntry) -> None:
        if entry.kind == "record":
            data = entry.data
            self._counts = {"pending": 0, "waiting": data["num_waiting"],
                            "running": data["num_running"]}
            self.hub.publish_record(data)
        else:
            self.hub.publish_event(entry.data)

    def _reset(self) -> None:
        self._counts = {"pending": 0, "waiting": 0, "running": 0}
        self.hub.reset()

    def _remember(self, state: PlayerState) -> None:
        self._state = state  # read by the status line without taking the player's lock

    def status(self) -> dict:
        state = self._state
        return {"source": "replay", "state": "ready", "model": self.model, "load_seconds": None,
                "load_error": None, "paused": not state.playing, "counts": self._counts,
                "engine": {"name": "batchscope", "version": "1"},
                "replay": {"trace": self.name, "iteration": state.iteration,
                           "num_iterations": state.num_iterations, "step": state.step,
                           "speed": state.speed, "playing": state.playing}}

    def close(self) -> None:
        self.player.close()


def trace_meta(trace: Trace) -> dict:
    """The views' meta for a trace: its phases in the order its records time them."""
    source = {"engine": "batchscope", "engine_version": "1",
              "model": trace.header["model"]["name"]}
    return view_meta(trace_phases(trace), source,
                     trace.header["engine"]["max_num_batched_tokens"])
