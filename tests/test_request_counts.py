"""Pending, waiting, running: one set of numbers everywhere. On a paused engine fired at with
the staggered preset and then stepped, the status every viewer gets (the header) agrees with
/metrics and with the requests the viewer knows (its cards) at each moment."""
from __future__ import annotations

import asyncio
import re
import time
import urllib.request

import pytest

from viz.ui.firing import Knobs, plan_shot
from viz.ui.presets import load_presets

from support.viewers import dashboard, ws_messages

COUNT = 4


def metrics(url: str) -> dict[str, int]:
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return {state: int(float(re.search(rf"^batchscope_requests_{state} (\S+)$", text,
                                       re.MULTILINE).group(1))) for state in ("pending", "waiting", "running")}


def settled(url: str, firing) -> tuple[dict, dict, list[dict]]:
    """The latest status and snapshot requests a new viewer gets, and /metrics, once the
    numbers hold still between two looks (no step runs while paused)."""
    while True:
        first = metrics(url)
        [snapshot] = asyncio.run(ws_messages(url, bool, 10))
        if metrics(url) == first and firing.pending() == snapshot["status"]["counts"]["pending"]:
            return snapshot["status"]["counts"], first, snapshot["requests"]
        time.sleep(0.05)


@pytest.fixture(scope="module")
def paused_run(tiny_model_dir):
    with dashboard(tiny_model_dir) as (server, app, llm):
        llm.pause()
        library = load_presets()
        planned = plan_shot(library, library.presets["staggered"], Knobs(COUNT, 4, 0.0, 300),
                            llm.tokenizer)
        firing = app.state.firing
        firing.fire(planned, owner=None)
        looks = []
        for _ in range(COUNT):  # each arrival, while paused
            looks.append(settled(server.url, firing))
            time.sleep(0.3)
        while firing.pending():
            time.sleep(0.05)
        looks.append(settled(server.url, firing))
        for _ in range(3):  # then step by step
            llm.step_once()
            time.sleep(0.3)
            looks.append(settled(server.url, firing))
        llm.resume()
    return looks


def test_header_metrics_and_cards_agree_at_every_look(paused_run):
    for counts, scraped, requests in paused_run:
        assert counts == scraped
        assert sum(counts.values()) == COUNT - sum(bool(r["finished"]) for r in requests)
        arrived = [r for r in requests if r["arrival"] is not None and not r["finished"]]
        assert len(arrived) == counts["waiting"] + counts["running"]
        pending = [r for r in requests if r["arrival"] is None and not r["finished"]]
        assert len(pending) == counts["pending"]  # a card for each


def test_a_paused_engine_shows_fired_requests_as_pending_then_waiting(paused_run):
    before_any_step = paused_run[COUNT]
    assert before_any_step[0] == {"pending": 0, "waiting": COUNT, "running": 0}
    assert any(look[0]["pending"] > 0 for look in paused_run[:COUNT])
    assert paused_run[-1][0]["running"] > 0
