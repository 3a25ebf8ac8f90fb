"""RecordSource: where views, traces and metrics get their records (plain data, no torch).

A source is anything that produces IterationRecord and RequestEvent dicts (engine/telemetry.py):
Batchscope's own engine (``AsyncLLM``), a replayed trace, a vLLM engine through its plugin.
Consumers read only these dicts and the source's ``info()``/``status()``/``counts()``, so a
new engine is a new source and never a change to the views.

Callbacks run on the producer's thread and must only hand data off. A record dict is shared
by all subscribers and must be treated as read-only.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Unsubscribe = Callable[[], None]


@dataclass(frozen=True)
class SourceInfo:
    """What a source is, fixed while it runs (``trace_header`` is what a trace file's header
    needs: model config, engine config, hardware)."""

    engine: str
    engine_version: str
    model: str
    phases: tuple[str, ...]
    block_size: int | None = None
    num_kv_blocks: int | None = None
    max_model_len: int | None = None
    trace_header: dict = field(default_factory=dict)
    can_fire: bool = False


@runtime_checkable
class RecordSource(Protocol):
    def subscribe(self, on_record: Callable[[dict], None]) -> Unsubscribe:
        """Every step's IterationRecord dict; returns a function that unsubscribes."""

    def subscribe_events(self, on_event: Callable[[dict], None]) -> Unsubscribe:
        """Every RequestEvent dict (arrivals, text deltas); returns an unsubscribe function."""

    def info(self) -> SourceInfo: ...

    def status(self) -> dict:
        """Live: ``{"state", "error", "paused", "load_seconds"}``."""

    def counts(self) -> dict[str, int]:
        """Live ``{"waiting": n, "running": n}``, consistent with each other at every moment."""
