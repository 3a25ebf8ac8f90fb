"""ShownQueues: the waiting and running counts of a source whose records do not see every
request the viewers do, folded from the same records and events the cards are drawn from.

A replayed trace's counts would otherwise be its last record's queue lengths. A vLLM record
counts only what vLLM's scheduler held when its step ran, so a request that arrived after it
showed "waiting" on its card while the header and /metrics said 0 waiting, until a later step
took it in. Here each request has the state its card shows: "waiting" from its arrival, then
the state of the latest record that lists it, until it finishes. Thread-safe: records and
events may come from different threads (attach mode).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

WAITING = frozenset({"waiting", "preempted"})
RUNNING = frozenset({"prefilling", "decoding"})


@dataclass
class ShownQueues:
    states: dict[str, str] = field(default_factory=dict)  # request id -> state, unfinished only
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def on_record(self, record: dict) -> None:
        states = {rid: info["status"] for rid, info in record["requests"].items()}
        ended = {*record["finished"], *record["aborted"],
                 *(rid for rid, state in states.items() if state == "finished")}
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
                self.states.setdefault(rid, "waiting")

    def counts(self) -> dict[str, int]:
        with self.lock:
            states = list(self.states.values())
        return {"waiting": sum(s in WAITING for s in states),
                "running": sum(s in RUNNING for s in states)}

    def clear(self) -> None:
        with self.lock:
            self.states.clear()
