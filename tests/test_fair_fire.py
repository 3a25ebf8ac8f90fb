"""Fair sharing of the engine among visitors who fire from the page (issue 24, part 2): a cap on
each visitor's requests in flight, admission in turns over visitors, the place each queued
request is told, and the presenter exempt. A fake submitter records the order in which
requests are handed to the engine and lets the test say when they start and finish."""
from __future__ import annotations

import threading
import time
import warnings

import pytest
from test_request_counts import settled

from engine.sampling_params import SamplingParams
from viz.live.identity import COOKIE, new_visitor_id
from viz.ui.firing import Firing, Knobs, PlannedRequest, plan_shot
from viz.ui.presets import load_presets
from viz.ui.strings import PAGE, PageError, unmarked

from support.viewers import dashboard

STARTED = {"prefilling", "decoding", "finished"}


class FakeSubmitter:
    """Hands nothing to an engine: records the order, keeps the states the test sets."""

    tokenizer = None

    def __init__(self) -> None:
        self.handed: list[str] = []
        self.states: dict[str, str] = {}
        self._cond = threading.Condition()

    def check_ready(self) -> None:
        pass

    def prepare(self, item: PlannedRequest, max_prompt_tokens: int | None) -> object:
        return item.prompt

    def submit(self, item: PlannedRequest) -> None:
        with self._cond:
            self.handed.append(item.request_id)
            self.states[item.request_id] = "waiting"
            self._cond.notify_all()

    def wait_for(self, request_ids: list[str], states: set[str], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: all(self.states.get(rid) in states for rid in request_ids), timeout)

    def set(self, request_id: str, state: str) -> None:
        with self._cond:
            self.states[request_id] = state
            self._cond.notify_all()

    def wait_handed(self, count: int, timeout: float = 5.0) -> list[str]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.handed) >= count, timeout), self.handed
            return list(self.handed)


class FakeHub:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.owners: dict[str, str | None] = {}

    def fired(self, request_id: str, owner: str | None, label: str | None = None) -> None:
        self.owners[request_id] = owner
        self.publish_event({"kind": "fired", "request_id": request_id, "time": time.time()})

    def publish_event(self, event: dict) -> None:
        self.events.append(event)


def shot(prefix: str, count: int) -> list[PlannedRequest]:
    return [PlannedRequest(f"{prefix}{i}", "hi", "hi", SamplingParams(max_tokens=2), 0.0)
            for i in range(count)]


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def told(hub: FakeHub, rid: str) -> dict | None:
    """The latest place ``rid`` was told (None before it is queued for its visitor's turn)."""
    places = [e["queue"] for e in hub.events if e["request_id"] == rid and "queue" in e]
    return places[-1] if places else None


@pytest.fixture
def fake():
    return FakeSubmitter()


def test_a_newcomer_goes_out_within_two_hand_overs_of_a_visitor_with_twenty_queued(fake):
    hub = FakeHub()
    firing = Firing(fake, hub, max_in_flight=100, engine_window=2)
    firing.fire(shot("a", 20), owner="alice")
    before = fake.wait_handed(2)
    firing.fire(shot("b", 1), owner="bob")
    # queued for its turn (told its place), not just counted: fire() counts at once, and its
    # thread queues the request a moment later (later still on a loaded machine)
    wait_until(lambda: firing.pending() == 19 and told(hub, "b0") is not None)
    for rid in before:  # the engine starts what it has: room for two more
        fake.set(rid, "decoding")
    after = fake.wait_handed(4)[2:]
    assert "b0" in after, after
    assert fake.wait_handed(4)[:2] == ["a0", "a1"]


def test_turns_alternate_between_visitors_with_requests_queued(fake):
    hub = FakeHub()
    firing = Firing(fake, hub, max_in_flight=100, engine_window=1)
    firing.fire(shot("a", 5), owner="alice")
    fake.wait_handed(1)
    firing.fire(shot("b", 3), owner="bob")
    wait_until(lambda: firing.pending() == 7 and told(hub, "b2") is not None)
    for n in range(1, 8):
        fake.set(fake.wait_handed(n)[-1], "decoding")
    assert fake.wait_handed(8) == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "a4"]
    wait_until(lambda: firing.pending() == 0)


def test_the_cap_fires_what_fits_and_says_so_in_both_languages(fake):
    firing = Firing(fake, FakeHub(), max_in_flight=3)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ids = firing.fire(shot("a", 5), owner="alice")
    assert ids == ["a0", "a1", "a2"]
    message = str(said[-1].message)
    assert message == PAGE.both("fire_capped", fired=3, asked=5, cap=3, rest=2)
    assert " · " in message and "3" in message
    with pytest.raises(PageError) as refused:
        firing.fire(shot("x", 1), owner="alice")
    assert refused.value.key == "fire_cap_full"
    assert PAGE.both("not_fired", reason=refused.value).count("3") >= 2  # cap said in both
    assert firing.fire(shot("b", 2), owner="bob") == ["b0", "b1"]  # others keep their share


def test_a_finished_request_gives_its_place_back(fake):
    firing = Firing(fake, FakeHub(), max_in_flight=2)
    firing.fire(shot("a", 2), owner="alice")
    fake.wait_handed(2)
    fake.set("a0", "finished")
    with pytest.warns(UserWarning, match="Fired 1 of 2"):
        assert firing.fire(shot("c", 2), owner="alice") == ["c0"]


def test_the_presenter_is_exempt_from_the_cap_and_the_turns(fake):
    firing = Firing(fake, FakeHub(), max_in_flight=3, engine_window=1)
    assert firing.fire(shot("p", 6), owner="host", presenter=True) == [f"p{i}" for i in range(6)]
    assert fake.wait_handed(6) == [f"p{i}" for i in range(6)]  # at once, as before


def test_requests_without_a_visitor_are_handed_over_as_before(fake):
    firing = Firing(fake, FakeHub(), max_in_flight=1, engine_window=1)
    assert len(firing.fire(shot("n", 4), owner=None)) == 4
    assert fake.wait_handed(4) == [f"n{i}" for i in range(4)]


def test_queued_requests_are_told_their_place_and_who_is_ahead(fake):
    hub = FakeHub()
    firing = Firing(fake, hub, max_in_flight=100, engine_window=1)
    firing.fire(shot("a", 3), owner="alice")
    fake.wait_handed(1)
    firing.fire(shot("b", 2), owner="bob")
    wait_until(lambda: told(hub, "b1") is not None and told(hub, "b1")["place"] == 3)
    assert told(hub, "b0") == {"place": 1, "visitors_ahead": 0}  # bob's turn: alice just had one
    assert told(hub, "a1") == {"place": 2, "visitors_ahead": 1}
    assert told(hub, "b1") == {"place": 3, "visitors_ahead": 1}
    assert told(hub, "a2") == {"place": 4, "visitors_ahead": 1}
    assert all(hub.owners[rid] == "alice" for rid in ("a0", "a1", "a2"))


def test_counts_agree_while_a_visitors_requests_wait_for_their_turn(tiny_model_dir):
    """A paused engine, a window of one: one request in the engine, three queued here; the
    header, /metrics and the cards say so alike, and all four finish once it runs."""
    with dashboard(tiny_model_dir) as (server, app, llm):
        llm.pause()
        firing = app.state.firing
        firing.share.engine_window = 1
        library = load_presets()
        planned = plan_shot(library, library.presets["chat"], Knobs(4, 3, 0.0, 0), llm.tokenizer)
        owner = app.state.identity.owner({COOKIE: new_visitor_id()})
        ids = firing.fire(planned, owner)
        wait_until(lambda: firing.pending() == 3)
        counts, scraped, requests = settled(server.url, firing)
        assert counts == scraped == {"pending": 3, "waiting": 1, "running": 0}
        assert len([r for r in requests if r["arrival"] is None and not r["finished"]]) == 3
        llm.resume()
        assert llm.wait_for(ids, {"finished"}, 60)
        wait_until(lambda: firing.pending() == 0)
        assert settled(server.url, firing)[0] == {"pending": 0, "waiting": 0, "running": 0}


@pytest.mark.parametrize("server_key, entered, capped", [("s3cret", "s3cret", False), ("s3cret", "wrong", True),
                                                         (None, "", True)])
def test_the_page_exempts_only_a_presenter_who_entered_the_servers_key(fake, server_key, entered, capped):
    """Fire's handler passes the presenter key: the key set and entered lifts the cap; with no
    key configured (a laptop open to the room) every visitor takes a share."""
    from types import SimpleNamespace

    from viz.ui.handlers import DashboardHandlers
    from viz.ui.presenter import PresenterAccess

    fake.tokenizer = load_presets  # (unused by a preset prompt; plan_shot only passes it on)
    firing = Firing(fake, FakeHub(), max_in_flight=2, engine_window=100)
    handlers = DashboardHandlers(None, firing, load_presets(), SimpleNamespace(owner=lambda cookies: "v"),
                                 recorder=None, access=PresenterAccess(server_key))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        said = unmarked(handlers.fire("chat", "", 5, 3, 0.0, 0, entered, SimpleNamespace(cookies={})))
    handed = fake.wait_handed(2 if capped else 5)
    time.sleep(0.2)  # (nothing more comes: the rest were not fired)
    assert len(fake.handed) == len(handed) == (2 if capped else 5), said
    assert said.startswith("Fired 2:" if capped else "Fired 5:"), said
