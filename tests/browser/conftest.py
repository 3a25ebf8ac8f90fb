"""Fixtures of the browser tests: the shipped trace's records (read here, as plain JSON Lines)
and ``app.py --replay`` of each shipped trace in its own process."""
from __future__ import annotations

import gzip
import json

import pytest
from replay_app import SHIPPED, VLLM_TRACE, replay_app


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """The IterationRecord dicts of the shipped trace, in order."""
    assert SHIPPED, "assets/traces/ holds no trace"
    with gzip.open(SHIPPED[0], "rt", encoding="utf-8") as lines:
        entries = [json.loads(line) for line in lines if line.strip()]
    return [e["data"] for e in entries if e.get("type") == "record"]


@pytest.fixture(scope="module")
def replay_server(tmp_path_factory):
    """Batchscope's own shipped trace, replayed."""
    with replay_app(SHIPPED[0], tmp_path_factory.mktemp("replay")) as server:
        yield server


@pytest.fixture(scope="module")
def vllm_replay_server(tmp_path_factory):
    """The shipped vLLM trace (vLLM-CPU through the plugin), replayed."""
    with replay_app(VLLM_TRACE, tmp_path_factory.mktemp("vllm_replay")) as server:
        yield server
