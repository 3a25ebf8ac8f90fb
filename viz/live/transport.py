"""The viewer transports: a websocket (/ws/telemetry) and Server-Sent Events
(GET /telemetry/stream, for proxies that do not pass websockets) carry the same messages
(hub.py). Which requests' text a connection may read follows from its ``bs_visitor`` cookie
(identity.py); nothing in the URL names a visitor.

A connection's hub comes from a ``Channels``: live, every viewer joins the one hub the engine
feeds; in a replay each viewer may get a hub and playback of its own (viz/sources/replay_channels.py).
A websocket opened with ``?compress=deflate-raw`` gets binary messages, each compressed once
for all the viewers it goes to (frames.py); any other ``compress`` is refused (close code 1008,
the reason says what is accepted), and without one the messages are text.

When a connection's sender fails (a snapshot that cannot be built, a send to a dead socket)
the failure is logged and the viewer leaves its hub at once.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse

from .frames import DEFLATE_RAW, Message
from .hub import TelemetryHub
from .identity import VisitorIdentity
from .viewer import Viewer

log = logging.getLogger(__name__)
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# uvicorn's: no permessage-deflate (it would compress every message once per connection;
# the browser asks for messages compressed once for all instead)
WEBSOCKET_OPTIONS = {"ws_per_message_deflate": False}
POLICY_VIOLATION = 1008


class Channels(Protocol):
    def open(self, owner: str | None) -> tuple[TelemetryHub, Viewer]: ...
    def close(self, hub: TelemetryHub, viewer: Viewer) -> None: ...


class SharedChannel:
    """Every viewer watches one hub (a live engine, or a replay everyone shares)."""

    def __init__(self, hub: TelemetryHub):
        self.hub = hub

    def open(self, owner: str | None) -> tuple[TelemetryHub, Viewer]:
        return self.hub, self.hub.connect(owner)

    def close(self, hub: TelemetryHub, viewer: Viewer) -> None:
        hub.disconnect(viewer)


async def messages(hub: TelemetryHub, viewer: Viewer) -> AsyncIterator[Message]:
    """The viewer's messages as they become due: a snapshot first and after any gap."""
    while True:
        frame = await viewer.next_frame()
        yield frame if frame is not None else hub.snapshot(viewer)


def install_transports(app: FastAPI, channels: Channels, identity: VisitorIdentity) -> None:
    @app.websocket("/ws/telemetry")
    async def telemetry(websocket: WebSocket) -> None:
        await websocket.accept()
        compress = websocket.query_params.get("compress")
        if compress not in (None, DEFLATE_RAW):
            await websocket.close(POLICY_VIOLATION, f"compress={compress!r}: only {DEFLATE_RAW!r} is offered")
            return
        hub, viewer = channels.open(identity.owner(websocket.cookies))
        try:
            await _serve_websocket(websocket, hub, viewer, compress == DEFLATE_RAW)
        finally:
            channels.close(hub, viewer)

    @app.get("/telemetry/stream", include_in_schema=False)
    async def telemetry_stream(request: Request) -> StreamingResponse:
        return StreamingResponse(_sse(channels, identity.owner(request.cookies)),
                                 media_type="text/event-stream", headers=SSE_HEADERS)


async def _serve_websocket(websocket: WebSocket, hub: TelemetryHub, viewer: Viewer,
                           deflated: bool) -> None:
    """Send until the browser leaves or the sender fails, whichever comes first."""
    sender = asyncio.create_task(_send_all(websocket, hub, viewer, deflated))
    listener = asyncio.create_task(_until_gone(websocket))
    done, _ = await asyncio.wait({sender, listener}, return_when=asyncio.FIRST_COMPLETED)
    for task in (sender, listener):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    failure = sender.exception() if sender in done else None
    if failure is not None and not isinstance(failure, WebSocketDisconnect):  # gone mid-send: a leave
        log.error("viewer %s: sending failed", viewer.id, exc_info=failure)
        with contextlib.suppress(Exception):
            await websocket.close(code=1011)


async def _send_all(websocket: WebSocket, hub: TelemetryHub, viewer: Viewer, deflated: bool) -> None:
    async for message in messages(hub, viewer):
        if deflated:
            await websocket.send_bytes(message.deflated)
        else:
            await websocket.send_text(message.text)


async def _until_gone(websocket: WebSocket) -> None:
    """The browser sends nothing; this notices when it leaves."""
    while (await websocket.receive())["type"] != "websocket.disconnect":
        pass


async def _sse(channels: Channels, owner: str | None) -> AsyncIterator[str]:
    """One ``data:`` line per message; the viewer joins when the stream starts."""
    hub, viewer = channels.open(owner)
    try:
        async for message in messages(hub, viewer):
            yield f"data: {message.text}\n\n"
    except Exception:
        log.exception("viewer %s: SSE stream failed", viewer.id)
    finally:
        channels.close(hub, viewer)
