"""A replayed trace as a source of the views: ``HubReplay`` plays a trace into a hub (the
replay counterpart of ``hub.attach(llm)``); every viewer's playback is one of these
(replay_channels.py)."""
from __future__ import annotations

from ..colors import view_meta
from ..traces.player import PlayerState, ReplayPlayer
from ..traces.trace import Trace, TraceEntry, trace_phases


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
        self.gaps = trace.lost_steps
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
        elif entry.kind == "event":
            self.hub.publish_event(entry.data)
        # a gap has nothing to show but its place: status.replay.gaps lists them

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
                           "speed": state.speed, "playing": state.playing,
                           "gaps": self.gaps}}

    def close(self) -> None:
        self.player.close()


def trace_meta(trace: Trace) -> dict:
    """The views' meta for a trace: its phases in the order its records time them."""
    source = {"engine": "batchscope", "engine_version": "1",
              "model": trace.header["model"]["name"]}
    return view_meta(trace_phases(trace), source,
                     trace.header["engine"]["max_num_batched_tokens"])
