"""Dashboard viewers for tests: a hub served over its transports, and clients that read
messages from the websocket or the SSE stream, with or without a visitor cookie."""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
import zlib
from collections.abc import Callable

import httpx
import websockets
from fastapi import FastAPI

from viz.live.frames import DEFLATE_RAW
from viz.live.hub import TelemetryHub
from viz.live.identity import VisitorCookies, VisitorIdentity
from viz.live.transport import SharedChannel, install_transports

from support.server import BackgroundServer

SECRET = b"test-secret"
Done = Callable[[list[dict]], bool]


def serve_hub(hub: TelemetryHub, identity: VisitorIdentity | None = None) -> BackgroundServer:
    app = FastAPI()
    app.add_middleware(VisitorCookies)
    install_transports(app, SharedChannel(hub), identity or VisitorIdentity(SECRET))
    return BackgroundServer(app)


def cookie_header(visitor: str | None) -> dict[str, str]:
    return {"Cookie": f"bs_visitor={visitor}"} if visitor else {}


def text_of(raw: str | bytes) -> str:
    """A websocket message's JSON text: binary ones are raw DEFLATE (``?compress=deflate-raw``)."""
    return raw if isinstance(raw, str) else zlib.decompress(raw, -zlib.MAX_WBITS).decode()


async def ws_messages(url: str, done: Done, timeout: float, visitor: str | None = None,
                      action: Callable[[], None] | None = None,
                      compress: str | None = DEFLATE_RAW) -> list[dict]:
    """Messages of /ws/telemetry until ``done(messages)``; ``action`` runs in a thread once
    the first message (the snapshot) came. ``compress``: asked as the page does, or None."""
    query = f"?compress={compress}" if compress else ""
    ws_url = url.replace("http://", "ws://") + "/ws/telemetry" + query
    messages: list[dict] = []
    async with websockets.connect(ws_url, max_size=None,
                                  additional_headers=cookie_header(visitor)) as ws:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not done(messages):
            try:
                messages.append(json.loads(text_of(await asyncio.wait_for(ws.recv(), 1.0))))
            except TimeoutError:
                continue
            if action is not None and len(messages) == 1:
                await asyncio.to_thread(action)
    return messages


async def sse_messages(url: str, done: Done, timeout: float, visitor: str | None = None,
                       action: Callable[[], None] | None = None) -> list[dict]:
    """The same from GET /telemetry/stream (one ``data:`` line per message)."""
    messages: list[dict] = []
    lines: asyncio.Queue[str] = asyncio.Queue()

    async def read(response: httpx.Response) -> None:
        async for line in response.aiter_lines():
            await lines.put(line)

    async with httpx.AsyncClient(timeout=timeout) as client, client.stream(
            "GET", url + "/telemetry/stream", headers=cookie_header(visitor)) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = asyncio.create_task(read(response))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not done(messages):
            try:
                line = await asyncio.wait_for(lines.get(), 1.0)
            except TimeoutError:
                continue
            if line.startswith("data: "):
                messages.append(json.loads(line[len("data: "):]))
                if action is not None and len(messages) == 1:
                    await asyncio.to_thread(action)
        reader.cancel()
    return messages


@contextlib.contextmanager
def dashboard(model_dir: str, *flags: str):
    """``app.py --model model_dir [flags]`` served in the background, its model loaded:
    yields (server, app, llm)."""
    import app as entry

    args = entry.build_parser().parse_args(["--model", model_dir, "--num-kv-blocks", "64",
                                            *flags])
    app, llm, _ = entry.create_app(args)
    with BackgroundServer(app) as server:
        llm.wait_ready(120)
        yield server, app, llm
