"""RequestStatusBoard: each request's latest state, as the engine side knows it.

A request is "waiting" from the moment a front hands it to AsyncLLM (even while the engine is
paused and its "add" still sits in the inbox), then takes the state each step's record gives
it ("prefilling", "decoding", "preempted", ...) until "finished". The waiting and running
counts are kept with the states under one lock, so ``counts()`` is consistent at every moment
and the header, the cards and /metrics can all show the same numbers. ``wait_for`` lets a
front wait for states (the dashboard's "after decoding" arrivals).
"""
from __future__ import annotations

import threading
import time
from collections import Counter, deque

RECENT_FINISHED = 1024  # finished requests whose state is still known
WAITING_STATES = ("waiting", "preempted")
RUNNING_STATES = ("prefilling", "decoding")


class RequestStatusBoard:
    def __init__(self):
        self._cond = threading.Condition()
        self._states: dict[str, str] = {}
        self._tally: Counter[str] = Counter()
        self._finished: deque[str] = deque()

    def update(self, states: dict[str, str]) -> None:
        """Set the state of each request in ``states`` (request id -> state)."""
        with self._cond:
            for request_id, state in states.items():
                self._set(request_id, state)
            while len(self._finished) > RECENT_FINISHED:
                self._states.pop(self._finished.popleft(), None)
            self._cond.notify_all()

    def _set(self, request_id: str, state: str) -> None:
        previous = self._states.get(request_id)
        if previous == state or previous == "finished":
            return
        if previous is not None:
            self._tally[previous] -= 1
        self._states[request_id] = state
        if state == "finished":
            self._finished.append(request_id)
        else:
            self._tally[state] += 1

    def get(self, request_id: str) -> str | None:
        with self._cond:
            return self._states.get(request_id)

    def counts(self) -> dict[str, int]:
        with self._cond:
            return {"waiting": sum(self._tally[s] for s in WAITING_STATES),
                    "running": sum(self._tally[s] for s in RUNNING_STATES)}

    def live(self) -> list[str]:
        """The requests not finished yet."""
        with self._cond:
            return [rid for rid, state in self._states.items() if state != "finished"]

    def wait_for(self, request_ids: list[str], states: set[str], timeout: float) -> bool:
        """Block until every request is in one of ``states``; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(self._states.get(rid) in states for rid in request_ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True
