"""RecordHistory: the records a viewer that connects late gets, enough for every request still
on screen.

A page draws its views from the latest 40 records, but its request autopsies (assets/js/lanes.js)
fold every record they see since a request arrived. A page that connects late (a new tab, a
reload) sees only what its snapshot holds, so the history reaches back to the arrival of the
oldest request a card would show (``RequestBook.oldest_arrival_on_screen``), never keeps less than
the latest ``keep`` records, and is bounded in bytes of serialised records (``max_bytes``), so a
snapshot stays small however long a request lives. Each record is serialised once, when it
enters (``RecordBody``, by the hub's tick): the frames of that tick and every later snapshot
reuse the text.
Not thread-safe: the hub calls it under its lock.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .frames import RecordBody

KEEP = 40  # records always kept: what a page's views draw (assets/js/state.js HISTORY)
MAX_BYTES = 2 << 20  # of serialised records in a snapshot


@dataclass
class RecordHistory:
    keep: int = KEEP
    max_bytes: int = MAX_BYTES
    _items: deque[tuple[dict, RecordBody]] = field(default_factory=deque)
    _bytes: int = 0

    def __len__(self) -> int:
        return len(self._items)

    def extend(self, records: list[dict], bodies: list[RecordBody]) -> None:
        """Add these records with their bodies (``RecordBody.of`` each: the frames of the tick
        send the same text)."""
        for record, body in zip(records, bodies, strict=True):
            self._items.append((record, body))
            self._bytes += len(body.members)
        return bodies

    def trim(self, since: float | None) -> None:
        """Drop the oldest records beyond ``keep`` that end before ``since`` (the oldest arrival
        on screen; None: nothing on screen), or while the history is over ``max_bytes``."""
        while len(self._items) > self.keep:
            record, body = self._items[0]
            needed = since is not None and record["t_end"] >= since
            if needed and self._bytes <= self.max_bytes:
                return
            self._items.popleft()
            self._bytes -= len(body.members)

    def items(self) -> tuple[list[dict], list[RecordBody]]:
        """The records, oldest first, and their bodies."""
        return [record for record, _ in self._items], [body for _, body in self._items]

    def clear(self) -> None:
        self._items.clear()
        self._bytes = 0
