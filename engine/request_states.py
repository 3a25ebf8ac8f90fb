"""RequestStates: each request's state, folded once from what a source emits; the one place
that counts waiting and running requests.

Every front keeps one: AsyncLLM for Batchscope's own engine (fed by the Fanout), the replay of
a trace and the ingest of an attached vLLM (fed by the records and events they pass on), the
OpenAI submitter that fires at a vLLM server. The header, the cards' "why it waits", /metrics
and the dashboard's "after the earlier ones are decoding" all read these counts and states, so
they agree because nothing else computes them.

A request is "waiting" from the moment it is handed over or its arrival is seen (a vLLM
record lists only what the scheduler held when its step ran, so a request that arrived after
it waits, not missing), then takes the state the latest record gives it ("prefilling",
"decoding", "preempted"), until it finishes: a finished delta, a record's ``finished`` or
``aborted``, or a "finished" state. "finished" is final; the last ``RECENT_FINISHED`` finished
requests are remembered for ``wait_for``. A data-parallel engine's records each come from one
rank (``data_parallel_rank``): a request counts for the rank whose latest record lists it
(``by_rank``); one no rank has listed yet counts in the total only. Thread-safe.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable

RECENT_FINISHED = 1024
WAITING = frozenset({"waiting", "preempted"})
RUNNING = frozenset({"prefilling", "decoding"})
FINISHED = "finished"


def data_parallel_rank(record: dict) -> int | None:
    """The rank of a data-parallel engine that ran ``record`` (its ``source.rank_step`` says the
    ingest merged ranks), or None for an engine with one rank."""
    source = record.get("source") or {}
    return source.get("data_parallel_rank") if "rank_step" in source else None


def tally(states: Iterable[str]) -> dict[str, int]:
    """``{"waiting": n, "running": n}`` of these states."""
    states = list(states)
    return {"waiting": sum(s in WAITING for s in states), "running": sum(s in RUNNING for s in states)}


class RequestStates:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._states: dict[str, tuple[str, int | None]] = {}  # request id -> (state, rank)
        self._finished: deque[str] = deque()

    # ---- folding in ------------------------------------------------------------------------
    def arrived(self, request_id: str) -> None:
        """Handed over, or its arrival seen: waiting, unless a record already placed it."""
        with self._cond:
            if request_id not in self._states:
                self._states[request_id] = ("waiting", None)
                self._cond.notify_all()

    def update(self, states: dict[str, str], rank: int | None = None) -> None:
        """The states a step gives its requests (request id -> state), on ``rank``."""
        with self._cond:
            for request_id, state in states.items():
                self._set(request_id, state, rank)
            self._forget_old()
            self._cond.notify_all()

    def finish(self, request_ids: Iterable[str]) -> None:
        self.update(dict.fromkeys(request_ids, FINISHED))

    def on_record(self, record: dict) -> None:
        """An IterationRecord dict: its requests' states, its finished and aborted requests."""
        states = {rid: info["status"] for rid, info in record["requests"].items()}
        states |= dict.fromkeys([*record["finished"], *record["aborted"]], FINISHED)
        self.update(states, data_parallel_rank(record))

    def on_event(self, event: dict) -> None:
        """A RequestEvent dict: an arrival waits; a finished delta ends its request."""
        if event.get("finished"):
            self.finish([event["request_id"]])
        elif event["kind"] == "arrival":
            self.arrived(event["request_id"])

    def _set(self, request_id: str, state: str, rank: int | None) -> None:
        previous = self._states.get(request_id)
        if previous is not None and previous[0] == FINISHED:
            return
        self._states[request_id] = (state, rank)
        if state == FINISHED:
            self._finished.append(request_id)

    def _forget_old(self) -> None:
        while len(self._finished) > RECENT_FINISHED:
            self._states.pop(self._finished.popleft(), None)

    def clear(self, rank: int | None = None) -> None:
        """Forget every request, or only those of ``rank`` (a rank that attached again)."""
        with self._cond:
            if rank is None:
                self._states.clear()
                self._finished.clear()
            else:
                self._states = {rid: held for rid, held in self._states.items() if held[1] != rank}

    # ---- reading -----------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        with self._cond:
            return tally(state for state, _ in self._states.values())

    def by_rank(self, ranks: Iterable[int]) -> dict[int, dict[str, int]]:
        """The counts of each of ``ranks``: the requests its latest records list."""
        with self._cond:
            held = list(self._states.values())
        return {rank: tally(state for state, owner in held if owner == rank) for rank in ranks}

    def get(self, request_id: str) -> str | None:
        with self._cond:
            held = self._states.get(request_id)
            return held[0] if held else None

    def live(self) -> list[str]:
        """The requests not finished yet."""
        with self._cond:
            return [rid for rid, (state, _) in self._states.items() if state != FINISHED]

    def wait_for(self, request_ids: list[str], states: set[str], timeout: float) -> bool:
        """Block until every request is in one of ``states``; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(self.get(rid) in states for rid in request_ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True
