"""FairShare: the engine shared fairly among the visitors who fire from the page.

Design (issue 24, part 2). The API limits each client (serve/limits.py,
``max_concurrent_per_client``); the page has the analogue here, keyed by the visitor's owner
token (the ``bs_visitor`` cookie, as everywhere else):

- Cap: a visitor has at most ``max_in_flight`` requests fired from the page and not finished
  (queued here, handed to the engine, or running). ``admit`` keeps what fits of a click; a
  request leaves the count when the submitter says it finished (or could not be handed over).
- Turns: a visitor's requests wait here (the header's "pending") and go to the engine one
  visitor at a time, round-robin: whoever was served last goes behind everyone now queued, so a
  newcomer's first request is next but one at most, however much another visitor queued.
- Window: the engine's own queue is first come first served, so at most ``engine_window``
  requests from here may sit in it not yet started (prefilling); one visitor's backlog stays
  here, where the turns apply. A lone visitor's preset (fewer than the window) still arrives at
  once, as the preset means.
- Places: each queued request is told its place (``{"place", "visitors_ahead"}``, on a
  ``fired`` event under ``queue``) when it changes, at most every ``PLACE_INTERVAL_S``; its card
  says "3rd in line: 2 visitors ahead" (assets/js/cards.js).

Requests without a visitor (owner None: Compare's own engines, scripts) and the presenter's
bypass all of this (firing.py hands them over at their times, as before). One daemon thread
takes turns; it polls the submitter's states (``wait_for`` with no wait) while anything is in
flight, and sleeps while nothing is.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .firing import PlannedRequest
    from .submit import Submitter

PAGE_MAX_IN_FLIGHT = 8  # per visitor: the largest preset's default count
ENGINE_WINDOW = 16  # page requests in the engine's queue, not yet started
PLACE_INTERVAL_S = 1.0  # place events: at most one per queued request a second
POLL_S = 0.05  # while requests wait for the window
IDLE_POLL_S = 0.5  # while requests are only in flight (their finish frees the visitor's share)
STARTED = {"prefilling", "decoding", "finished"}
FINISHED = {"finished"}


@dataclass(slots=True)
class Turns:
    """Requests queued per visitor, taken round-robin. Not thread-safe (FairShare locks)."""
    queues: OrderedDict[str, deque[PlannedRequest]] = field(default_factory=OrderedDict)
    last: str | None = None  # served last: behind everyone queued at the next turn

    def __len__(self) -> int:
        return sum(len(queue) for queue in self.queues.values())

    def put(self, owner: str, item: PlannedRequest) -> None:
        self.queues.setdefault(owner, deque()).append(item)

    def take(self) -> PlannedRequest:
        if self.last in self.queues:
            self.queues.move_to_end(self.last)
        owner, queue = next(iter(self.queues.items()))
        item = queue.popleft()
        if not queue:
            del self.queues[owner]
        self.last = owner
        return item

    def places(self) -> dict[str, dict[str, int]]:
        """request id -> its place (1: next) and the other visitors with a request before it."""
        owners = [o for o in self.queues if o != self.last] + \
            ([self.last] if self.last in self.queues else [])
        depth = max((len(queue) for queue in self.queues.values()), default=0)
        order = [(o, self.queues[o][r]) for r in range(depth) for o in owners
                 if r < len(self.queues[o])]
        places, seen = {}, set()
        for i, (owner, item) in enumerate(order):
            places[item.request_id] = {"place": i + 1, "visitors_ahead": len(seen - {owner})}
            seen.add(owner)
        return places


@dataclass
class FairShare:
    submitter: Submitter
    hand_over: Callable[[PlannedRequest], bool]  # to the engine; False: it failed (and ended)
    publish: Callable[[dict], None]  # a hub's publish_event
    max_in_flight: int = PAGE_MAX_IN_FLIGHT
    engine_window: int = ENGINE_WINDOW
    _turns: Turns = field(default_factory=Turns, init=False)
    _in_flight: dict[str, set[str]] = field(default_factory=dict, init=False)  # owner -> ids
    _unstarted: set[str] = field(default_factory=set, init=False)  # handed over, not started
    _told: dict[str, dict[str, int]] = field(default_factory=dict, init=False)  # places said
    _told_at: float = field(default=0.0, init=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def admit(self, owner: str, planned: list[PlannedRequest]) -> list[PlannedRequest]:
        """The first requests of a click that fit the visitor's share (maybe none)."""
        with self._cond:
            self._prune()
            ids = self._in_flight.setdefault(owner, set())
            fits = planned[:max(self.max_in_flight - len(ids), 0)]
            ids.update(item.request_id for item in fits)
            return fits

    def put(self, owner: str, item: PlannedRequest) -> None:
        """Queue an admitted request for its visitor's turn (at its arrival time)."""
        with self._cond:
            self._turns.put(owner, item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="batchscope-turns",
                                                 daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            item = self._next()
            if not self.hand_over(item):
                with self._cond:
                    self._unstarted.discard(item.request_id)
                    for ids in self._in_flight.values():
                        ids.discard(item.request_id)

    def _next(self) -> PlannedRequest:
        """The next request whose turn it is, once the engine's queue has room."""
        with self._cond:
            while True:
                self._prune()
                if self._turns and len(self._unstarted) < self.engine_window:
                    item = self._turns.take()
                    self._told.pop(item.request_id, None)
                    self._unstarted.add(item.request_id)
                    return item
                self._tell_places()
                self._cond.wait(self._poll_s())

    def _poll_s(self) -> float | None:
        if self._turns:
            return POLL_S
        return IDLE_POLL_S if self._in_flight else None

    def _prune(self) -> None:
        """Forget the started requests in the window and the finished ones in flight."""
        self._unstarted = {rid for rid in self._unstarted if not self._reached(rid, STARTED)}
        for owner, ids in list(self._in_flight.items()):
            ids.difference_update([rid for rid in ids if self._reached(rid, FINISHED)])
            if not ids:
                del self._in_flight[owner]

    def _reached(self, request_id: str, states: set[str]) -> bool:
        return self.submitter.wait_for([request_id], states, 0)

    def _tell_places(self) -> None:
        """A ``fired`` event with its place for each queued request whose place changed."""
        now = time.monotonic()
        if now - self._told_at < PLACE_INTERVAL_S:
            return
        self._told_at = now
        for rid, place in self._turns.places().items():
            if self._told.get(rid) != place:
                self._told[rid] = place
                self.publish({"kind": "fired", "request_id": rid, "time": time.time(),
                              "queue": place})
