"""Faults injected into a running engine (tests only)."""
from __future__ import annotations


class Fatal(BaseException):
    """Nothing in the engine's loop handles this: the thread dies."""


def kill_on_next_step(llm, monkeypatch) -> None:
    """The engine thread of ``llm`` (an AsyncLLM) dies at its next step."""
    def crash():
        raise Fatal("the engine thread was killed")

    monkeypatch.setattr(llm.engine, "step", crash)
