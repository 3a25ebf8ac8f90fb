"""A loopback stand-in for Batchscope's ingest websocket (protocol: batchscope_vllm/sender.py),
for the sender's tests and the integration test. It can refuse a token, stall (stop reading,
so TCP back-pressure reaches the sender) and be stopped and restarted on the same port."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Self

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import serve


class Receiver:
    def __init__(self, token: str = "secret", port: int = 0) -> None:
        self.token = token
        self.hellos: list[dict] = []
        self.messages: list[dict] = []
        self.reading = threading.Event()  # cleared: the handler stops reading (a stalled server)
        self.reading.set()
        self._server = serve(self._handle, "127.0.0.1", port, compression=None, max_size=None)
        self.port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ingest"

    @property
    def records(self) -> list[dict]:
        return [m["data"] for m in self.messages if m.get("type") == "record"]

    @property
    def stats(self) -> list[dict]:
        return [m for m in self.messages if m.get("type") == "stats"]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.reading.set()
        self._server.shutdown()
        self._thread.join(5)

    def _handle(self, ws) -> None:
        hello = json.loads(ws.recv())
        self.hellos.append(hello)
        if hello.get("type") != "hello" or hello.get("token") != self.token:
            ws.close(4401, "bad token")
            return
        ws.send(json.dumps({"type": "welcome"}))
        try:
            while True:
                self.reading.wait()
                self.messages.append(json.loads(ws.recv()))
        except ConnectionClosed:
            pass


def wait_until(condition, what: str, limit: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


async def refusal(url: str, first: str) -> int | None:
    """The close code a real ingest endpoint answers a client whose first message is ``first``."""
    import websockets

    async with websockets.connect(url) as ws:
        await ws.send(first)
        try:
            await asyncio.wait_for(ws.recv(), 10)
        except websockets.ConnectionClosed:
            pass
        await ws.wait_closed()
        return ws.close_code
