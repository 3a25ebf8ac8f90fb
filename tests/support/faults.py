"""Faults injected into a running engine (tests only): test doubles installed on the engine's
parts, so product code carries no test hook."""
from __future__ import annotations


class Fatal(BaseException):
    """Nothing in the engine's loop handles this: the thread dies."""


def kill_on_next_step(llm, monkeypatch) -> None:
    """The engine thread of ``llm`` (an AsyncLLM) dies at its next step."""
    def crash():
        raise Fatal("the engine thread was killed")

    monkeypatch.setattr(llm.engine, "step", crash)


def fail_next_forward(llm, error: Exception) -> None:
    """The next step's forward pass (the model runner's ``execute``) raises ``error``, once: the
    engine fails that step's requests and goes on. ``llm`` is an AsyncLLM."""
    runner = llm.engine.runner

    def fail_once(*args, **kwargs):
        del runner.execute  # the runner's own execute from the next step on
        raise error

    runner.execute = fail_once
