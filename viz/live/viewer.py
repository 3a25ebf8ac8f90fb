"""Viewer: one connected browser's bounded outbox.

The hub pushes serialized frames; the viewer's transport task (websocket or SSE) pops and
sends them. When the browser does not keep up the outbox drops its oldest frame instead of
growing or making the hub wait, and marks the viewer for a resync snapshot, sent before its
next frame. ``id`` is the opaque name of this connection, sent in its snapshot (``viewer``);
the replay controls take it to act on this viewer's playback only.
"""
from __future__ import annotations

import asyncio
import secrets
from collections import deque
from dataclasses import dataclass, field

from .frames import Message
from .privacy import Audience


def new_viewer_id() -> str:
    return secrets.token_urlsafe(12)


@dataclass(eq=False)
class Viewer:
    audience: Audience
    capacity: int = 16
    id: str = field(default_factory=new_viewer_id)
    dropped: int = 0
    needs_snapshot: bool = True  # the first message is always a snapshot
    _outbox: deque[Message] = field(default_factory=deque)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, message: Message) -> None:
        """Queue a frame (event-loop thread); never blocks."""
        if len(self._outbox) >= self.capacity:
            self._outbox.popleft()
            self.dropped += 1
            self.needs_snapshot = True
        self._outbox.append(message)
        self._ready.set()

    def wake(self) -> None:
        self._ready.set()

    async def next_frame(self) -> Message | None:
        """The next frame to send, or None when a snapshot is due first (the outbox is then
        emptied: the snapshot covers everything in it)."""
        while not self._outbox and not self.needs_snapshot:
            self._ready.clear()
            await self._ready.wait()
        if self.needs_snapshot:
            self.needs_snapshot = False
            self._outbox.clear()
            return None
        return self._outbox.popleft()
