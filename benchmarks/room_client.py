"""The room benchmark's viewers: many dashboard viewers in one light process.

    python -m benchmarks.room_client URL [--no-deflate]      (started by benchmarks/room.py)

Every viewer is an asyncio task holding one /ws/telemetry websocket (the ``websockets``
library, offering permessage-deflate as browsers do) with a fresh ``bs_visitor`` cookie of
its own, asking for compressed messages as the page does (``?compress=deflate-raw``; text
with --no-deflate, as a browser without DecompressionStream), and reads every message. Each
distinct message is inflated and parsed once (``Parsed``): the viewers of a room are sent the same
bytes, and each browser parses its own copy on its own machine, which this benchmark must not
charge to the host it measures (parsing every copy here took 3/4 of the client's 0.5 cores with
300 viewers). It notes the wall-clock time
each frame arrived and, for each record in it, the lag from the record's ``t_end``. Viewer 0
stays connected for the whole run and also notes each request's first-token time (from delta
events, and from snapshot entries), so that room.py can time the firers' clicks.

It is driven over stdin/stdout, one JSON object a line each way:

- ``{"viewers": n}``: connect or disconnect viewers until n are connected, each having
  received its first message; answers ``{"ready": n, "failed": k}``.
- ``{"summary": [[kind, t0, t1], ...]}``: the windows measured; answers with the frame rates
  and lags of each kind of window (room_summary.py) and viewer 0's first-token times, then
  disconnects everyone and exits.

Its CPU time is what room.py reports as the client's cores; it does nothing but read.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import zlib
from array import array
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import websockets

from benchmarks.room_summary import frame_rates, lag_percentiles, per_second_counts
from viz.live.identity import COOKIE, new_visitor_id

CONNECT_AT_ONCE = 64  # handshakes in flight together
READY_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 5.0
PARSED_KEPT = 256  # distinct messages remembered (a few steps' worth of every kind of message)


@dataclass
class ViewerLog:
    """What one viewer received: frame arrival times, and per record its arrival and lag."""

    opened: float
    closed: float | None = None
    frames: array = field(default_factory=lambda: array("d"))
    lag_at: array = field(default_factory=lambda: array("d"))
    lags: array = field(default_factory=lambda: array("d"))
    snapshots: array = field(default_factory=lambda: array("d"))  # arrival times
    error: str | None = None

    def note(self, now: float, message: dict) -> None:
        kind = message.get("type")
        if kind == "snapshot":
            self.snapshots.append(now)
        elif kind == "frame":
            self.frames.append(now)
            for record in message.get("records") or ():
                self.lag_at.append(now)
                self.lags.append(now - record["t_end"])

    def spans(self, t0: float, t1: float) -> bool:
        return self.opened <= t0 and (self.closed is None or self.closed >= t1) and self.error is None


def note_first_tokens(message: dict, first: dict[str, float]) -> None:
    """The earliest first-token time of each request seen in a snapshot or a frame."""
    for entry in message.get("requests") or ():
        if entry.get("first_token") is not None:
            first.setdefault(entry["request_id"], entry["first_token"])
    for event in message.get("events") or ():
        if event.get("kind") == "delta" and event.get("token_ids"):
            first.setdefault(event["request_id"], event["time"])


class Parsed:
    """Messages by their bytes: identical bytes parsed once, read-only for every viewer."""

    def __init__(self):
        self._messages: OrderedDict[bytes | str, dict] = OrderedDict()

    def __call__(self, raw: bytes | str) -> dict:
        message = self._messages.get(raw)
        if message is None:
            message = json.loads(raw if isinstance(raw, str) else zlib.decompress(raw, -zlib.MAX_WBITS))
            self._messages[raw] = message
            if len(self._messages) > PARSED_KEPT:
                self._messages.popitem(last=False)
        return message


@dataclass
class Viewer:
    log: ViewerLog
    ready: asyncio.Event
    task: asyncio.Task | None = None


class Room:
    """The connected viewers, and the logs of every viewer that ever was."""

    def __init__(self, url: str, deflate: bool):
        self.url = url.replace("http://", "ws://") + "/ws/telemetry" + ("?compress=deflate-raw" if deflate else "")
        self.live: list[Viewer] = []
        self.logs: list[ViewerLog] = []
        self.first_tokens: dict[str, float] = {}
        self.extensions: set[str] = set()  # what the server answered to the offer, per handshake
        self._handshakes = asyncio.Semaphore(CONNECT_AT_ONCE)
        self._parsed = Parsed()

    async def watch(self, viewer: Viewer, first_tokens: dict[str, float] | None) -> None:
        headers = {"Cookie": f"{COOKIE}={new_visitor_id()}"}
        try:
            async with self._handshakes:
                ws = await websockets.connect(self.url, max_size=None, compression="deflate",
                                              additional_headers=headers, ping_interval=None,
                                              open_timeout=READY_TIMEOUT_S, close_timeout=CLOSE_TIMEOUT_S)
            self.extensions.add(ws.response.headers.get("Sec-WebSocket-Extensions", "none"))
            async with ws:
                async for raw in ws:
                    now = time.time()
                    message = self._parsed(raw)
                    viewer.log.note(now, message)
                    if first_tokens is not None:
                        note_first_tokens(message, first_tokens)
                    viewer.ready.set()
        except (OSError, websockets.WebSocketException, TimeoutError) as exc:
            viewer.log.error = f"{type(exc).__name__}: {exc}"
            viewer.ready.set()

    def _open(self) -> Viewer:
        viewer = Viewer(ViewerLog(time.time()), asyncio.Event())
        first = self.first_tokens if not self.logs else None  # viewer 0 times first tokens
        self.logs.append(viewer.log)
        viewer.task = asyncio.create_task(self.watch(viewer, first))
        return viewer

    async def resize(self, n: int) -> dict:
        leaving, self.live = self.live[n:], self.live[:n]
        await asyncio.gather(*(self._close(v) for v in leaving))
        opened = [self._open() for _ in range(n - len(self.live))]
        self.live += opened
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(v.ready.wait() for v in opened)), READY_TIMEOUT_S)
        failed = [v for v in opened if v.log.error is not None or not v.ready.is_set()]
        return {"ready": len(self.live) - len(failed), "failed": len(failed),
                "errors": sorted({v.log.error or "no message" for v in failed})[:3]}

    @staticmethod
    async def _close(viewer: Viewer) -> None:
        viewer.log.closed = time.time()
        viewer.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await viewer.task

    async def close(self) -> None:
        await self.resize(0)

    def summary(self, windows: list[list]) -> dict:
        kinds = sorted({kind for kind, _, _ in windows})
        return {"kinds": {kind: self._kind_summary([(t0, t1) for k, t0, t1 in windows if k == kind])
                          for kind in kinds},
                "first_tokens": self.first_tokens, "viewers_opened": len(self.logs),
                "viewers_failed": sum(1 for log in self.logs if log.error is not None),
                "extensions": sorted(self.extensions)}

    def _kind_summary(self, spans: list[tuple[float, float]]) -> dict:
        counts, lags, snapshots = [], [], 0
        for t0, t1 in spans:
            for log in self.logs:
                if not log.spans(t0, t1):
                    continue
                counts.append(per_second_counts(log.frames, t0, t1))
                lags += [lag for at, lag in zip(log.lag_at, log.lags, strict=True) if t0 <= at < t1]
                snapshots += sum(1 for at in log.snapshots if t0 <= at < t1)  # after lost frames
        rates = frame_rates(counts)
        return {"frames_per_s": asdict(rates) if rates else None, "lag": lag_percentiles(lags),
                "resyncs": snapshots}


async def serve(room: Room) -> None:
    """Answer room.py's commands until the summary."""
    while line := await asyncio.to_thread(sys.stdin.readline):
        command = json.loads(line)
        if "viewers" in command:
            answer = await room.resize(int(command["viewers"]))
        else:
            answer = room.summary(command["summary"])
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if "summary" in command:
            return


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--no-deflate", action="store_true", help="ask for text messages, not deflate-raw")
    args = parser.parse_args(argv)
    room = Room(args.url, deflate=not args.no_deflate)
    try:
        await serve(room)
    finally:
        await room.close()


if __name__ == "__main__":
    asyncio.run(main())
