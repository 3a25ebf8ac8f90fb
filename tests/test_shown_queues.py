"""ShownQueues: a replay counts each request in the state its card shows. One that arrived after
the last step (vLLM's records do not list it yet) is waiting, not missing."""
from __future__ import annotations

from viz.sources.shown_queues import ShownQueues


def record(requests: dict[str, str], finished=(), aborted=()) -> dict:
    return {"requests": {rid: {"status": status} for rid, status in requests.items()},
            "finished": dict.fromkeys(finished, "length"), "aborted": list(aborted)}


def arrival(rid: str) -> dict:
    return {"kind": "arrival", "request_id": rid, "finished": False}


def test_a_request_waits_from_its_arrival_until_a_step_lists_it():
    queues = ShownQueues()
    queues.on_record(record({"A": "decoding"}))
    queues.on_event(arrival("B"))
    assert queues.counts() == {"waiting": 1, "running": 1}
    queues.on_record(record({"A": "decoding"}))  # a step that has not taken B in yet
    assert queues.counts() == {"waiting": 1, "running": 1}
    queues.on_record(record({"A": "decoding", "B": "prefilling"}))
    assert queues.counts() == {"waiting": 0, "running": 2}


def test_preempted_requests_wait_and_finished_or_aborted_ones_leave():
    queues = ShownQueues()
    for rid in "ABCD":
        queues.on_event(arrival(rid))
    queues.on_record(record({"A": "decoding", "B": "preempted", "C": "finished", "D": "decoding"},
                            finished=["C"]))
    assert queues.counts() == {"waiting": 1, "running": 2}
    queues.on_event({"kind": "delta", "request_id": "A", "finished": True})
    queues.on_record(record({"B": "preempted"}, aborted=["D"]))
    assert queues.counts() == {"waiting": 1, "running": 0}
    queues.clear()
    assert queues.counts() == {"waiting": 0, "running": 0}
