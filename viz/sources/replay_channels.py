"""Replay playback per viewer: each connection gets its own hub and player over the trace,
starting paused on the first iteration, so one visitor scrubbing moves nobody else.

With ``shared`` (``app.py --replay TRACE --shared-view``, a workshop where the presenter's
screen is everyone's) all viewers watch one playback instead, and anyone's controls drive it.

Controls: ``POST /replay/{play,pause,step,seek,speed}?viewer=ID&value=`` act on the playback
of viewer ``ID`` (the ``viewer`` of its snapshot) and answer its new state. Without
``viewer`` they act on the calling visitor's most recently opened viewer (its cookie).
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass

from fastapi import FastAPI, HTTPException, Request

from ..live.hub import TelemetryHub
from ..live.identity import VisitorIdentity
from ..live.viewer import Viewer
from ..traces.player import ReplayPlayer
from ..traces.trace import Trace
from .replay import ReplaySource

REPLAY_ACTIONS = ("play", "pause", "step", "seek", "speed")


@dataclass(frozen=True, eq=False)
class Playback:
    """One playback of the trace and the hub that fans it out."""

    source: ReplaySource
    hub: TelemetryHub

    @classmethod
    def of(cls, trace: Trace, name: str,
           viewer_count: Callable[[], int] | None = None) -> Playback:
        """A playback paused on the first iteration, which its hub already holds."""
        source = ReplaySource(trace, name)
        hub = TelemetryHub(public=True, viewer_count=viewer_count)
        hub.attach(source, kind="replay")
        source.subscribe_restarts(hub.reset)
        source.player.seek(0)
        hub.tick()  # the first iteration is in the history of the first snapshot
        return cls(source, hub)

    async def retire(self) -> None:
        await self.hub.stop()
        await asyncio.to_thread(self.source.close)


class ReplayChannels:
    def __init__(self, trace: Trace, name: str, shared: bool = False):
        self.trace = trace
        self.name = name
        self._playbacks: dict[str, Playback] = {}  # viewer id -> its playback
        self._latest: dict[str | None, str] = {}  # owner -> its latest viewer id
        self._shared = self._new_playback() if shared else None
        self._retiring: set[asyncio.Task] = set()

    @property
    def num_iterations(self) -> int:
        return len(self.trace.records)

    def _new_playback(self) -> Playback:
        return Playback.of(self.trace, self.name, lambda: len(self._playbacks))

    def open(self, owner: str | None) -> tuple[TelemetryHub, Viewer]:
        playback = self._shared or self._new_playback()
        viewer = playback.hub.connect(owner)
        self._playbacks[viewer.id] = playback
        self._latest[owner] = viewer.id
        return playback.hub, viewer

    def close(self, hub: TelemetryHub, viewer: Viewer) -> None:
        hub.disconnect(viewer)
        playback = self._playbacks.pop(viewer.id, None)
        if playback is not None and playback is not self._shared:
            task = asyncio.get_running_loop().create_task(playback.retire())
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    def player(self, viewer_id: str | None, owner: str | None) -> ReplayPlayer | None:
        """The player ``viewer_id`` watches (or the owner's latest viewer's)."""
        if self._shared is not None:
            return self._shared.source.player
        playback = self._playbacks.get(viewer_id or self._latest.get(owner, ""))
        return playback.source.player if playback is not None else None

    async def aclose(self) -> None:
        """Stop every playback (server shutdown)."""
        playbacks = {id(p): p for p in self._playbacks.values()}
        if self._shared is not None:
            playbacks[id(self._shared)] = self._shared
        self._playbacks.clear()
        for playback in playbacks.values():
            await playback.retire()
        for task in list(self._retiring):
            with contextlib.suppress(asyncio.CancelledError):
                await task


def install_replay_routes(app: FastAPI, channels: ReplayChannels,
                          identity: VisitorIdentity) -> None:
    """The replay bar's buttons, speed and scrubber; answers the playback's new state."""
    @app.post("/replay/{action}", include_in_schema=False)
    def control(action: str, request: Request, viewer: str | None = None,
                value: float | None = None) -> dict:
        if action not in REPLAY_ACTIONS:
            raise HTTPException(404)
        if action in ("seek", "speed") and value is None:
            raise HTTPException(422, f"{action} needs ?value=")
        player = channels.player(viewer, identity.owner(request.cookies))
        if player is None:
            raise HTTPException(404, "no such viewer: connect first and pass its ?viewer=")
        try:
            _act(player, action, value)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return asdict(player.state)


def _act(player: ReplayPlayer, action: str, value: float | None) -> None:
    if action == "seek":
        player.seek(int(value))
    elif action == "speed":
        player.set_speed(value)
    else:
        getattr(player, action)()
