"""Ships records to Batchscope's ingest websocket without ever blocking vLLM's step loop.

Ingest protocol, version 1 (JSON text frames; Batchscope serves it at ``/ingest``):

1. client -> server, first frame of every connection::

     {"type": "hello", "protocol": 1, "token": <BATCHSCOPE_INGEST_TOKEN or null>,
      "engine": {"name": "vllm", "version": "0.32.0", "pid": 1234, "data_parallel_rank": 0},
      "info": {"model", "block_size", "num_kv_blocks", "max_model_len", "phases",
               "trace_header": {"model", "engine", "hardware"}}}

   ``info`` carries the fields of Batchscope's ``SourceInfo`` (engine/record_source.py).
2. server -> client: ``{"type": "welcome"}`` when the token is accepted. Otherwise it closes
   the connection with code 4401 (bad or missing token), 4400 (not a valid hello) or 4409
   (another engine is attached); the client then retries at its longest backoff and logs the
   refusal once.
3. client -> server, after the welcome, in any order:
   ``{"type": "record", "data": <IterationRecord dict, schema v2>}``, one per engine step in
   step order (``step`` jumps over records dropped on this side), and
   ``{"type": "stats", "dropped": <records dropped since start>, "sent": <records sent>}``
   after the welcome and whenever ``dropped`` grew (at most once a second).
   The server never has to answer; it may drop records it cannot take.

Behaviour: ``submit`` appends to a bounded queue under a lock and returns; when the queue is
full the oldest record is dropped and counted. A daemon thread owns the websocket: it connects,
says hello, waits for the welcome, then sends queued records; on any failure it reconnects with
exponential backoff (``BACKOFF``), also when the connection closes while vLLM is idle (checked
every ``STATS_INTERVAL``), so a restarted Batchscope sees an idle engine again without waiting
for its next step. So a Batchscope that is down, slow or restarting costs vLLM nothing but the
records it missed. JSON encoding happens on the sender thread.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.protocol import State
from websockets.sync.client import connect as ws_connect

PROTOCOL = 1
CAPACITY = 256  # records; a few seconds of steps on a busy engine
BACKOFF = (0.5, 10.0)  # first and longest wait between connection attempts, seconds
WELCOME_TIMEOUT = 10.0
STATS_INTERVAL = 1.0
CLOSE_REFUSED = (4400, 4401, 4409)

log = logging.getLogger("vllm.batchscope")


class Refused(Exception):
    """Batchscope answered the hello with a refusal."""


class IngestSender:
    def __init__(self, url: str, hello: dict, *, capacity: int = CAPACITY,
                 backoff: tuple[float, float] = BACKOFF,
                 connect: Callable = ws_connect) -> None:
        self.url = url
        self.hello = {"type": "hello", "protocol": PROTOCOL, **hello}
        self.capacity = capacity
        self.backoff = backoff
        self.dropped = 0
        self.sent = 0
        self.connections = 0  # welcomed connections so far
        self._connect = connect
        self._queue: deque[dict] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._problem: str | None = None  # kind of the current outage, to log each one once
        self._stats_sent = (-1, 0.0)  # (dropped, monotonic time) of the last stats frame
        self._thread = threading.Thread(target=self._run, name="batchscope-ingest", daemon=True)

    # ---- producer side (vLLM's step loop) ----------------------------------------------------
    def start(self) -> IngestSender:
        self._thread.start()
        return self

    def submit(self, record: dict) -> None:
        """Queue ``record``; never blocks beyond a short lock, never raises."""
        with self._lock:
            if len(self._queue) >= self.capacity:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(record)
        self._wake.set()

    def close(self, timeout: float = 1.0) -> None:
        """Stop after sending what is queued, waiting at most ``timeout`` seconds."""
        self._closing.set()
        self._wake.set()
        self._thread.join(timeout)

    # ---- the sender thread ---------------------------------------------------------------------
    def _run(self) -> None:
        delay = self.backoff[0]
        while not self._closing.is_set():
            try:
                with self._connect(self.url, open_timeout=5, close_timeout=1,
                                   compression=None) as ws:
                    self._handshake(ws)
                    delay = self.backoff[0]
                    self._pump(ws)
                    return  # closing and drained
            except Refused as exc:
                delay = self.backoff[1]
                self._report("refused", f"Batchscope at {self.url} refused this engine: {exc}",
                             logging.ERROR)
            except (OSError, TimeoutError, WebSocketException) as exc:
                self._report("unreachable", f"Batchscope at {self.url} is unreachable ({exc!r}); "
                             "vLLM keeps serving, records are dropped while retrying")
            except Exception:  # a bug here must cost the records, never the engine
                log.exception("Batchscope sender: unexpected failure; reconnecting")
            self._closing.wait(delay)
            delay = min(delay * 2, self.backoff[1])

    def _handshake(self, ws) -> None:
        ws.send(json.dumps(self.hello, default=str))
        try:
            answer = json.loads(ws.recv(timeout=WELCOME_TIMEOUT))
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code in CLOSE_REFUSED:
                raise Refused(f"{exc.rcvd.code} {exc.rcvd.reason}") from None
            raise
        except (ValueError, TypeError):
            raise Refused("the answer to the hello is not JSON") from None
        if not isinstance(answer, dict) or answer.get("type") != "welcome":
            raise Refused(f"expected a welcome, got {str(answer)[:80]!r}")
        self.connections += 1
        if self._problem is not None:
            log.info("Batchscope at %s: connected again", self.url)
        self._problem = None
        self._stats_sent = (-1, 0.0)

    def _pump(self, ws) -> None:
        while True:
            self._send_stats(ws)
            record = self._take()
            if record is not None:
                self._send_record(ws, record)
            elif self._closing.is_set():
                return
            else:
                self._wake.wait(STATS_INTERVAL)
                self._wake.clear()
                if ws.state is not State.OPEN:  # gone while vLLM is idle: say hello again now
                    raise ConnectionError("Batchscope closed the connection")

    def _send_record(self, ws, record: dict) -> None:
        try:
            ws.send(json.dumps({"type": "record", "data": record}, default=str))
        except BaseException:
            with self._lock:
                self.dropped += 1  # taken off the queue but never delivered
            raise
        self.sent += 1

    def _take(self) -> dict | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _send_stats(self, ws) -> None:
        last_dropped, last_time = self._stats_sent
        now = time.monotonic()
        if self.dropped != last_dropped and now - last_time >= STATS_INTERVAL:
            ws.send(json.dumps({"type": "stats", "dropped": self.dropped, "sent": self.sent}))
            self._stats_sent = (self.dropped, now)

    def _report(self, kind: str, message: str, level: int = logging.WARNING) -> None:
        if kind != self._problem:
            log.log(level, message)
        self._problem = kind
