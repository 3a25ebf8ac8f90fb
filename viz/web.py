"""HTTP and websocket routes of the dashboard, installed on the FastAPI app before Gradio.

- ``/ws/telemetry?owner=TOKEN``: the viewer stream (message format: hub.py); a token that owns
  no request is served the anonymous viewers' frames.
- ``/plotly.min.js``: plotly.js from the installed plotly wheel (never a CDN).
- ``/batchscope/js/*.js`` (ES modules, entry ``js/main.js``), ``/batchscope/dashboard.css``,
  ``/batchscope/strings.json``: the page's client.
- ``POST /replay/{play,pause,step,seek,speed}?value=``: the replay bar's controls (replay mode).
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import asdict
from pathlib import Path

import plotly
from fastapi import FastAPI, HTTPException, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse

from .hub import TelemetryHub
from .replay import ReplayPlayer

ASSETS = Path(__file__).resolve().parent.parent / "assets"
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
CLIENT_FILES = {"dashboard.css": "text/css", "strings.json": "application/json",
                **{p.relative_to(ASSETS).as_posix(): "text/javascript"
                   for p in (ASSETS / "js").rglob("*.js")}}
HEAD = (
    '<script src="/plotly.min.js"></script>\n'
    '<link rel="stylesheet" href="/batchscope/dashboard.css">\n'
    '<script type="module" src="/batchscope/js/main.js"></script>\n'
)
REPLAY_HEAD = HEAD
REPLAY_ACTIONS = ("play", "pause", "step", "seek", "speed")


def install_routes(app: FastAPI, hub: TelemetryHub) -> None:
    @app.get("/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="text/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    @app.get("/batchscope/{name:path}", include_in_schema=False)
    def client_file(name: str) -> FileResponse:
        if name not in CLIENT_FILES:
            raise HTTPException(404)
        return FileResponse(ASSETS / name, media_type=CLIENT_FILES[name],
                            headers={"Cache-Control": "no-cache"})

    @app.websocket("/ws/telemetry")
    async def telemetry(websocket: WebSocket, owner: str = "") -> None:
        await websocket.accept()
        viewer = hub.connect(owner)
        sender = asyncio.create_task(_send_frames(websocket, hub, viewer))
        try:
            while True:  # the browser sends nothing; this notices when it leaves
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
        except WebSocketDisconnect:
            pass
        finally:
            hub.disconnect(viewer)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender


async def _send_frames(websocket: WebSocket, hub: TelemetryHub, viewer) -> None:
    while True:
        frame = await viewer.next_frame()
        await websocket.send_text(frame if frame is not None else hub.snapshot(viewer.audience))


def install_replay_routes(app: FastAPI, player: ReplayPlayer) -> None:
    """The replay bar's buttons, speed and scrubber (assets/replay.js); answers the new state."""
    @app.post("/replay/{action}", include_in_schema=False)
    def control(action: str, value: float | None = None) -> dict:
        if action not in REPLAY_ACTIONS:
            raise HTTPException(404)
        if action in ("seek", "speed") and value is None:
            raise HTTPException(422, f"{action} needs ?value=")
        try:
            if action == "seek":
                player.seek(int(value))
            elif action == "speed":
                player.set_speed(value)
            else:
                getattr(player, action)()
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return asdict(player.state)
