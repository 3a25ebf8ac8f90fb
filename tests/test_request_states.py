"""RequestStates: the one reducer of request states every source feeds (the engine's Fanout, a
replay, an attached vLLM). A request counts as the state its card shows: waiting from its arrival
(vLLM's records do not list it yet), then its latest record's state, until it finishes."""
from __future__ import annotations

import json
import threading
from pathlib import Path

from engine.request_states import RECENT_FINISHED, RequestStates, tally


def record(requests: dict[str, str], finished=(), aborted=(), rank: int | None = None) -> dict:
    source = {} if rank is None else {"data_parallel_rank": rank, "rank_step": 0}
    return {"requests": {rid: {"status": status} for rid, status in requests.items()},
            "finished": dict.fromkeys(finished, "length"), "aborted": list(aborted), "source": source}


def arrival(rid: str) -> dict:
    return {"kind": "arrival", "request_id": rid, "finished": False}


def test_a_request_waits_from_its_arrival_until_a_step_lists_it():
    states = RequestStates()
    states.on_record(record({"A": "decoding"}))
    states.on_event(arrival("B"))
    assert states.counts() == {"waiting": 1, "running": 1}
    states.on_record(record({"A": "decoding"}))  # a step that has not taken B in yet
    assert states.counts() == {"waiting": 1, "running": 1}
    states.on_record(record({"A": "decoding", "B": "prefilling"}))
    assert states.counts() == {"waiting": 0, "running": 2}
    states.on_event(arrival("B"))  # a late arrival event does not send it back to waiting
    assert states.get("B") == "prefilling"


def test_preempted_requests_wait_and_finished_or_aborted_ones_leave():
    states = RequestStates()
    for rid in "ABCD":
        states.on_event(arrival(rid))
    states.on_record(record({"A": "decoding", "B": "preempted", "C": "finished", "D": "decoding"},
                            finished=["C"]))
    assert states.counts() == {"waiting": 1, "running": 2}
    states.on_event({"kind": "delta", "request_id": "A", "finished": True})
    states.on_record(record({"B": "preempted"}, aborted=["D"]))
    assert states.counts() == {"waiting": 1, "running": 0}
    assert states.live() == ["B"]
    states.clear()
    assert states.counts() == {"waiting": 0, "running": 0}


def test_finished_is_final_even_when_a_later_step_still_lists_the_request():
    """Async scheduling: a request that finished at step N can appear in N+1's record."""
    states = RequestStates()
    states.on_record(record({"A": "decoding"}, finished=["A"]))
    states.on_record(record({"A": "decoding"}))
    assert states.get("A") == "finished" and states.counts() == {"waiting": 0, "running": 0}


def test_each_rank_counts_the_requests_its_latest_record_lists():
    states = RequestStates()
    states.on_event(arrival("C"))  # no rank has it yet: in the total only
    states.on_record(record({"A": "decoding"}, rank=0))
    states.on_record(record({"B": "prefilling", "A": "preempted"}, rank=1))
    assert states.by_rank([0, 1]) == {0: {"waiting": 0, "running": 0}, 1: {"waiting": 1, "running": 1}}
    assert states.counts() == {"waiting": 2, "running": 1}
    states.clear(rank=1)  # rank 1 attached again: it holds none of them
    assert states.counts() == {"waiting": 1, "running": 0}


def test_wait_for_wakes_on_the_state_and_old_finished_requests_are_forgotten():
    states = RequestStates()
    states.arrived("A")
    threading.Timer(0.05, states.update, [{"A": "decoding"}]).start()
    assert states.wait_for(["A"], {"decoding"}, 5)
    assert not states.wait_for(["A"], {"finished"}, 0.01)
    states.finish(f"old{i}" for i in range(RECENT_FINISHED + 1))
    assert states.get("old0") is None and states.get(f"old{RECENT_FINISHED}") == "finished"


def test_the_shared_stream_folds_to_the_states_the_browser_shows_too():
    """tests/data/request_states.json, folded here as the browser folds it (tests/js/state.test.js)."""
    messages = json.loads((Path(__file__).parent / "data" / "request_states.json").read_text())["messages"]
    states = RequestStates()
    for i, message in enumerate(messages):
        for event in message.get("events", []):
            states.on_event(event)
        if "record" in message:
            states.on_record(message["record"])
        assert {rid: states.get(rid) for rid in message["expect"]} == message["expect"], f"after message {i}"
        assert states.counts() == tally(message["expect"].values())
