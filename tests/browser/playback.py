"""A replay page's own playback, for the browser tests: open it on its first iteration and bring
it to an iteration (``app.py --replay`` itself runs from replay_app.py)."""
from __future__ import annotations

from chromium import debug, scrub, wait_for
from replay_app import ReplayServer
from truth import shows


def open_replay(driver, server: ReplayServer) -> None:
    driver.get(server.url + "/")
    wait_for(driver, lambda: (s := debug(driver)) and s["lastStep"] >= 0, "the first iteration")


def show_iteration(driver, records: list[dict], i: int) -> dict:
    """Bring this page's replay to iteration ``i`` (a step when it is the next one, else a
    seek) and wait until the views draw it."""
    record = records[i]
    shown = debug(driver)["lastStep"]
    if i and shown == records[i - 1]["step"]:
        driver.find_element("id", "bs-replay-step").click()
    elif shown != record["step"]:
        scrub(driver, i)
    wait_for(driver, lambda: shows(driver, record), f"step {record['step']} drawn")
    return record
