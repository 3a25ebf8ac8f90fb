"""The dashboard's colours, defined once: the browser gets them in the snapshot's ``meta``
(assets hold no copy) and the offline exports (viz/traces/export.py) use the same ones.

Request colours cycle through ``PALETTE`` (a request's ``color`` index, viz/live/book.py); the KV pool
draws free and cached blocks in ``FREE_COLOR`` and ``CACHED_COLOR``. Each engine phase has a
fixed colour, so the same phase looks the same in every view and export; phases of a source
this table does not know take the spare colours in order.
"""
from __future__ import annotations

from collections.abc import Iterable

PALETTE = ("#4e9af1", "#f28e2b", "#59c96b", "#e15759", "#b07aa1", "#edc948",
           "#76b7b2", "#ff9da7", "#c49c6b", "#a0cbe8", "#d4e157", "#f06bd0")
FREE_COLOR = "#343e56"
CACHED_COLOR = "#6a7fa8"
PHASE_COLORS = {
    "schedule": "#8da0cb",
    "prepare": "#66c2a5",
    "forward": "#fc8d62",
    "sample": "#e78ac3",
    "postprocess": "#a6a6a6",
    "execute": "#fc8d62",  # vLLM's model execution: the forward pass and sampling
    "update": "#a6d854",  # vLLM's scheduler update from the model output
}
SPARE_PHASE_COLORS = ("#ffd92f", "#e5c494", "#b3b3b3", "#8dd3c7", "#bebada", "#80b1d3")
# A request's state over iterations in the exported timeline (viz/traces/export.py).
STATE_COLORS = {"idle": "#ffffff", "waiting": "#d9d9d9", "prefill": "#1f77b4",
                "prefill chunk": "#6baed6", "decode": "#2ca02c", "preempted": "#d62728"}


def phase_colors(phases: Iterable[str]) -> list[dict]:
    """``[{"name", "color"}]`` for a source's phases, in its order."""
    spare = iter(SPARE_PHASE_COLORS * 4)
    return [{"name": name, "color": PHASE_COLORS.get(name) or next(spare)} for name in phases]


def view_meta(phases: Iterable[str], source: dict, budget_hint: int | None = None) -> dict:
    """The snapshot's ``meta``: everything the views draw with that is not in a record."""
    meta = {"palette": list(PALETTE), "free_color": FREE_COLOR, "cached_color": CACHED_COLOR,
            "phases": phase_colors(phases), "source": source}
    if budget_hint is not None:
        meta["budget_hint"] = budget_hint
    return meta
