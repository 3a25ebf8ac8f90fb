"""RequestStream: the deltas of one request, for a thread (iterate) or an event loop (async for).

The engine thread ``put_all``s each step's deltas; a consumer blocks on a condition, or awaits
an event that the engine thread sets through the consumer's loop (``call_soon_threadsafe``, once
a loop a step).
"""
from __future__ import annotations

import asyncio
import threading
from collections import deque

from .outputs import RequestDelta, RequestOutput
from .request import Request


class RequestStream:
    """The deltas of one request, in order, ending with one whose ``finished`` is True."""

    def __init__(self, request: Request):
        self.request_id = request.request_id
        self.prompt_token_ids = list(request.prompt_token_ids)
        self.arrival_time = request.arrival_time
        self.asked_logprobs = request.sampling_params.logprobs is not None
        self._items: deque[RequestDelta] = deque()
        self._cond = threading.Condition()
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def push(self, delta: RequestDelta) -> tuple[asyncio.AbstractEventLoop, asyncio.Event] | None:
        """Queue ``delta`` and wake a thread reading the stream; returns the event an event
        loop reading it waits on, for the caller to set (``put_all``)."""
        with self._cond:
            self._items.append(delta)
            self._cond.notify_all()
            return self._waiter

    def __iter__(self):
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                delta = self._items.popleft()
            yield delta
            if delta.finished:
                return

    def __aiter__(self):
        return self._async_deltas()

    async def _async_deltas(self):
        event = asyncio.Event()
        with self._cond:
            self._waiter = (asyncio.get_running_loop(), event)
        while True:
            with self._cond:
                delta = self._items.popleft() if self._items else None
                if delta is None:
                    event.clear()
            if delta is None:
                await event.wait()
                continue
            yield delta
            if delta.finished:
                return

    def collect(self) -> RequestOutput:
        """Block until the request ends; return the whole output."""
        return self._merge(list(self))

    async def result(self) -> RequestOutput:
        return self._merge([d async for d in self])

    def _merge(self, deltas: list[RequestDelta]) -> RequestOutput:
        out = RequestOutput(self.request_id, self.prompt_token_ids, arrival_time=self.arrival_time,
                            logprobs=[] if self.asked_logprobs else None)
        for delta in deltas:
            out.add(delta)
        return out


def put_all(deliveries: list[tuple[RequestStream, RequestDelta]]) -> None:
    """Queue each delta on its stream and wake each event loop reading any of them once: one
    ``call_soon_threadsafe`` (a write to the loop's self-pipe, and a GIL hand-over to the loop
    thread) a step, not one a request."""
    events: dict[asyncio.AbstractEventLoop, list[asyncio.Event]] = {}
    for stream, delta in deliveries:
        if (waiter := stream.push(delta)) is not None:
            events.setdefault(waiter[0], []).append(waiter[1])
    for loop, waiting in events.items():
        try:
            loop.call_soon_threadsafe(_set_all, waiting)
        except RuntimeError:  # the consumers' loop is gone
            pass


def _set_all(events: list[asyncio.Event]) -> None:
    for event in events:
        event.set()
