"""One API request's life in the engine: its deltas, its abort on disconnect, its release.

``ApiCall.close`` runs exactly once however the request ends (finished, client gone, handler
cancelled): it aborts the request if the engine still has it, freeing its KV blocks before the
next step, and gives its admission ticket back.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from fastapi import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from engine import AsyncLLM, RequestDelta, RequestStream
from engine.outputs import TokenLogprobs

from .limits import Ticket


@dataclass
class Outcome:
    """A finished request, merged from its deltas."""

    text_parts: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # when the request asked
    finish_reason: str | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


class ApiCall:
    def __init__(self, llm: AsyncLLM, stream: RequestStream, ticket: Ticket):
        self.llm = llm
        self.stream = stream
        self.ticket = ticket
        self.finished = False
        self._closed = False

    @property
    def request_id(self) -> str:
        return self.stream.request_id

    async def deltas(self) -> AsyncIterator[RequestDelta]:
        async for delta in self.stream:
            self.ticket.started()
            self.finished = delta.finished
            yield delta

    async def outcome(self, request: Request) -> Outcome:
        """Wait for the whole output, aborting the request if the client goes away meanwhile."""
        watcher = asyncio.create_task(self._abort_on_disconnect(request))
        outcome = Outcome()
        try:
            async for delta in self.deltas():
                outcome.text_parts.append(delta.text)
                outcome.token_ids.extend(delta.token_ids)
                outcome.logprobs.extend(delta.logprobs or [])
                outcome.finish_reason, outcome.error = delta.finish_reason, delta.error
        finally:
            watcher.cancel()
        return outcome

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.finished:
            self.llm.abort(self.request_id)
        self.ticket.release()

    async def _abort_on_disconnect(self, request: Request) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.llm.abort(self.request_id)


class EventStreamResponse(StreamingResponse):
    """Server-sent events that call ``on_close`` when the response ends for any reason.

    Starlette cancels the body iterator when the client disconnects, and may never start it
    if the client is already gone, so cleanup lives here rather than in the iterator.
    """

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], None]):
        super().__init__(events, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
