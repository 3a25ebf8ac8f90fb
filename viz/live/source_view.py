"""SourceView: what a record source shows beside its records: the status every frame carries
and the snapshot's ``meta``, from the source's ``info()``, ``status()`` and ``counts()``
(engine/record_source.py), so that a live engine, a replayed trace and any other source look
the same to the views.

The status is ``{"source": kind, "model", "engine": {"name", "version"}, "counts":
{"pending", "waiting", "running"}, **source.status()}``: a source may add its own keys (a
replay its playback). ``info()`` is read once the source has loaded (it is fixed from then
on and may be costly to build).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..colors import view_meta

if TYPE_CHECKING:
    from engine.record_source import RecordSource, SourceInfo


class SourceView:
    def __init__(self, source: RecordSource, pending: Callable[[], int] = lambda: 0,
                 kind: str = "live"):
        self.source = source
        self.pending = pending
        self.kind = kind
        self._info: SourceInfo | None = None

    def info(self) -> SourceInfo:
        if self._info is not None:
            return self._info
        info = self.source.info()
        if self.source.status()["state"] != "loading":
            self._info = info
        return info

    def status(self) -> dict:
        info = self.info()
        return {"source": self.kind, "model": info.model, "engine": self._engine(info),
                "counts": {"pending": self.pending(), **self.source.counts()},
                **self.source.status()}

    @staticmethod
    def _engine(info: SourceInfo) -> dict:
        """Name and version; the CPU plan's summary where the engine has one (ours)."""
        plan = info.trace_header.get("plan")
        return {"name": info.engine, "version": info.engine_version,
                **({"plan": plan["summary"]} if plan else {})}

    def meta(self) -> dict:
        info = self.info()
        return view_meta(info.phases, {"engine": info.engine,
                                       "engine_version": info.engine_version,
                                       "model": info.model})
