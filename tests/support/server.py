"""BackgroundServer: run an ASGI app with uvicorn on a thread (tests and benchmarks only)."""
from __future__ import annotations

import socket
import threading
import time

import uvicorn

from viz.live.transport import WEBSOCKET_OPTIONS


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class BackgroundServer:
    """``with BackgroundServer(app) as server: ... server.url``; stopped on exit.
    ``options`` go to ``uvicorn.Config`` (e.g. ``proxy_headers``)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int | None = None,
                 start_timeout: float = 30.0, **options):
        self.host, self.port = host, port or free_port(host)
        self.start_timeout = start_timeout
        config = uvicorn.Config(app, host=self.host, port=self.port, log_level="warning",
                                ws_ping_interval=None,
                                **{"timeout_graceful_shutdown": 2, **WEBSOCKET_OPTIONS, **options})
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
