"""RequestStream: the deltas of one request, for a thread (iterate) or an event loop (async for).

The engine thread ``put``s each delta; a consumer blocks on a condition, or awaits an event
that the engine thread sets through the consumer's loop (``call_soon_threadsafe``).
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

    def put(self, delta: RequestDelta) -> None:
        with self._cond:
            self._items.append(delta)
            self._cond.notify_all()
            waiter = self._waiter
        if waiter is not None:
            loop, event = waiter
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the consumer's loop is gone
                pass

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
