"""ShownQueues: the waiting and running counts of a source whose records do not see every
request the viewers do, folded from the same records and events the cards are drawn from.

A replayed trace's counts would otherwise be its last record's queue lengths. A vLLM record
counts only what vLLM's scheduler held when its step ran, so a request that arrived after it
showed "waiting" on its card while the header and /metrics said 0 waiting, until a later step
took it in. Here each request has the state its card shows: "waiting" from its arrival, then
the state of the latest record that lists it, until it finishes. A data-parallel engine's
records each come from one rank (``data_parallel_rank``): a request counts for the rank whose
latest record lists it, so a rank's counts are those of its latest record (``by_rank``), and a
request no rank has listed yet counts in the total only. Thread-safe: records and events may
come from different threads (attach mode).
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

WAITING = frozenset({"waiting", "preempted"})
RUNNING = frozenset({"prefilling", "decoding"})


def data_parallel_rank(record: dict) -> int | None:
    """The rank of a data-parallel engine that ran ``record`` (its ``source.rank_step`` says the
    ingest merged ranks), or None for an engine with one rank."""
    source = record.get("source") or {}
    return source.get("data_parallel_rank") if "rank_step" in source else None


@dataclass
class ShownQueues:
    # request id -> (its state, the rank whose latest record lists it), unfinished only
    states: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def on_record(self, record: dict) -> None:
        rank = data_parallel_rank(record)
        states = {rid: (info["status"], rank) for rid, info in record["requests"].items()}
        ended = {*record["finished"], *record["aborted"],
                 *(rid for rid, (state, _) in states.items() if state == "finished")}
        with self.lock:
            self.states.update(states)
            for rid in ended:
                self.states.pop(rid, None)

    def on_event(self, event: dict) -> None:
        rid = event["request_id"]
        with self.lock:
            if event.get("finished"):
                self.states.pop(rid, None)
            elif event["kind"] == "arrival":
                self.states.setdefault(rid, ("waiting", None))

    def counts(self) -> dict[str, int]:
        with self.lock:
            states = [state for state, _ in self.states.values()]
        return _tally(states)

    def by_rank(self, ranks: Iterable[int]) -> dict[int, dict[str, int]]:
        """The counts of each of ``ranks``: the requests its latest records list."""
        with self.lock:
            held = list(self.states.values())
        return {rank: _tally(state for state, owner in held if owner == rank) for rank in ranks}

    def clear(self, rank: int | None = None) -> None:
        """Forget every request, or only those of ``rank`` (a rank that attached again)."""
        with self.lock:
            if rank is None:
                self.states.clear()
            else:
                self.states = {rid: held for rid, held in self.states.items() if held[1] != rank}


def _tally(states: Iterable[str]) -> dict[str, int]:
    states = list(states)
    return {"waiting": sum(s in WAITING for s in states), "running": sum(s in RUNNING for s in states)}
