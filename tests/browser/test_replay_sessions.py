"""Two visitors on one replay: each has its own playback, starting paused on the first
iteration; one scrubbing and stepping leaves the other where it was."""
from __future__ import annotations

from chromium import chromium, debug, needs_chromium, scrub, wait_for

pytestmark = needs_chromium


def position(driver) -> tuple[int, int] | None:
    """(the replay iteration this page's status reports, the step its views show)."""
    state = debug(driver)
    replay = ((state or {}).get("status") or {}).get("replay")
    return (replay["iteration"], state["lastStep"]) if replay else None


def test_one_visitor_scrubbing_and_stepping_leaves_the_other_in_place(replay_server, records):
    steps = [r["step"] for r in records]
    with chromium(1366, 768) as first, chromium(1366, 768) as second:
        for driver in (first, second):
            driver.get(replay_server.url + "/")
            wait_for(driver, lambda d=driver: position(d) == (0, steps[0]), "a fresh visitor on iteration 1")
        scrub(first, 150)
        wait_for(first, lambda: position(first) == (150, steps[150]), "the first visitor's seek")
        first.find_element("id", "bs-replay-step").click()
        wait_for(first, lambda: position(first) == (151, steps[151]), "the first visitor's step")
        assert "iteration 152 / " in first.find_element("id", "bs-replay-position").text
        assert position(second) == (0, steps[0])
        second.find_element("id", "bs-replay-step").click()
        wait_for(second, lambda: position(second) == (1, steps[1]), "the second visitor's own step")
        assert position(first) == (151, steps[151])
        assert "iteration 2 / " in second.find_element("id", "bs-replay-position").text
