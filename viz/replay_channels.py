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
from dataclasses import asdict

from fastapi import FastAPI, HTTPException, Request

from .hub import TelemetryHub
from .identity import VisitorIdentity
from .replay import HubReplay, ReplayPlayer
from .trace import Trace
from .viewer import Viewer

REPLAY_ACTIONS = ("play", "pause", "step", "seek", "speed")


class ReplayChannels:
    def __init__(self, trace: Trace, name: str, shared: bool = False):
        self.trace = trace
        self.name = name
        self._shared = self._new_replay() if shared else None
        self._replays: dict[str, HubReplay] = {}  # viewer id -> its playback
        self._latest: dict[str | None, str] = {}  # owner -> its latest viewer id
        self._retiring: set[asyncio.Task] = set()

    @property
    def num_iterations(self) -> int:
        return len(self.trace.records)

    def _new_replay(self) -> HubReplay:
        hub = TelemetryHub(public=True)
        replay = HubReplay(self.trace, hub, self.name)
        replay.player.seek(0)  # the first iteration is on screen, paused,
        hub.tick()  # and in the history of the first snapshot
        base = replay.status
        hub.set_status_provider(lambda: {**base(), "viewers": len(self._replays)})
        return replay

    def open(self, owner: str | None) -> tuple[TelemetryHub, Viewer]:
        replay = self._shared or self._new_replay()
        viewer = replay.hub.connect(owner)
        self._replays[viewer.id] = replay
        self._latest[owner] = viewer.id
        return replay.hub, viewer

    def close(self, hub: TelemetryHub, viewer: Viewer) -> None:
        hub.disconnect(viewer)
        replay = self._replays.pop(viewer.id, None)
        if replay is not None and replay is not self._shared:
            task = asyncio.get_running_loop().create_task(_retire(replay))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    def player(self, viewer_id: str | None, owner: str | None) -> ReplayPlayer | None:
        """The playback ``viewer_id`` watches (or the owner's latest viewer's)."""
        if self._shared is not None:
            return self._shared.player
        replay = self._replays.get(viewer_id or self._latest.get(owner, ""))
        return replay.player if replay is not None else None

    async def aclose(self) -> None:
        """Stop every playback (server shutdown)."""
        replays = {id(r): r for r in self._replays.values()}
        if self._shared is not None:
            replays[id(self._shared)] = self._shared
        self._replays.clear()
        for replay in replays.values():
            await _retire(replay)
        for task in list(self._retiring):
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _retire(replay: HubReplay) -> None:
    await replay.hub.stop()
    await asyncio.to_thread(replay.close)


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
