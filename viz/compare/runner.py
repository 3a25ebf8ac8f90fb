"""CompareRunner: one arrival pattern through two engine configurations, one after the other.

Design note. A compare must not disturb the shared live engine: its visitors keep their
policy, budget, queue and prefix cache. So each side runs on an engine of its own
(``AsyncLLM`` with the live engine's options and the side's policy and token budget), loaded
for the run and shut down after it: a fresh prefix cache and KV pool for each side, and never
two extra models in memory at once. On a CPU the two runs go one after the other (they would
slow each other down otherwise) and the page then plays them in sync; they share the machine
with the live engine, whose steps they may slow while they run. The runner works on its own
thread, never on the server's event loop, takes one compare at a time (``CompareBusy``) and
keeps the latest result. Each side keeps only records and arrival events, like any record
source: the page computes everything it shows from them.
"""
from __future__ import annotations

import gc
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.host_memory import release_free_memory

from ..live.hub import TelemetryHub
from ..ui.firing import Firing
from ..ui.submit import LocalSubmitter
from .pattern import ArrivalPattern

log = logging.getLogger(__name__)
RUN_TIMEOUT_S = 300.0
MAX_MIN_STEP_S = 0.5  # one side's requests, from its first arrival to its last token
LOAD_TIMEOUT_S = 300.0
_ids = itertools.count(1)


class CompareBusy(RuntimeError):
    """A compare is running already (one at a time)."""


@dataclass(frozen=True)
class CompareSide:
    label: str  # "A" | "B"
    policy: str
    budget: int

    def options(self) -> dict:
        return {"policy": self.policy, "max_num_batched_tokens": self.budget}


@dataclass
class CompareState:
    id: int
    pattern: ArrivalPattern
    sides: tuple[CompareSide, CompareSide]
    min_step_s: float = 0.0  # slow motion for both runs (each step takes at least this long)
    state: str = "running"  # "running" | "done" | "failed"
    running: str | None = None  # the side running now
    error: str | None = None
    results: list[dict] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None


EngineFactory = Callable[..., object]


def default_engine(model: str, **options):
    from engine import AsyncLLM

    return AsyncLLM(model, **options)


class CompareRunner:
    def __init__(self, model: str, options: dict, make_engine: EngineFactory = default_engine,
                 run_timeout_s: float = RUN_TIMEOUT_S):
        """``options``: the live engine's EngineConfig keywords (a side changes its policy
        and token budget)."""
        self.model = model
        self.options = dict(options)
        self.make_engine = make_engine
        self.run_timeout_s = run_timeout_s
        self._lock = threading.Lock()
        self._current: CompareState | None = None
        self._latest_done: CompareState | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self, pattern: ArrivalPattern, sides: tuple[CompareSide, CompareSide],
              min_step_s: float = 0.0) -> int:
        """Start a compare in the background; its id (CompareBusy while one runs).
        ``min_step_s``: slow motion for both runs, so that on a busy machine a step outlasts
        the timing noise and the latencies show the schedule (the page says so)."""
        if not 0 <= min_step_s <= MAX_MIN_STEP_S:
            raise ValueError(f"slow motion must be 0 to {MAX_MIN_STEP_S * 1000:.0f} ms per step")
        with self._lock:
            if self._closed:
                raise RuntimeError("the server is stopping")
            if self._current is not None and self._current.state == "running":
                raise CompareBusy("a compare is running already")
            self._current = CompareState(next(_ids), pattern, sides, min_step_s)
            self._thread = threading.Thread(target=self._run, args=(self._current,),
                                            name="batchscope-compare", daemon=True)
            self._thread.start()
            return self._current.id

    def state(self) -> dict:
        """What the page polls: the current compare's state, and the latest result's id."""
        current, done = self._current, self._latest_done
        if current is None:
            return {"state": "idle", "latest": None}
        return {"id": current.id, "state": current.state, "running": current.running,
                "error": current.error, "latest": done.id if done else None,
                "pattern": current.pattern.title, "sides": [s.__dict__ for s in current.sides]}

    def result(self) -> dict | None:
        """The latest finished compare, everything the page plays (None before the first)."""
        done = self._latest_done
        return None if done is None else _result_json(done, self.model)

    def close(self) -> None:
        """Stop taking compares; wait a little for one that runs (its engines shut down)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    # ---- the compare's thread ----------------------------------------------------------------
    def _run(self, compare: CompareState) -> None:
        try:
            for side in compare.sides:
                compare.running = side.label
                compare.results.append(self._run_side(compare, side))
                gc.collect()  # the side's engine may sit in reference cycles (its Firing's share)
                release_free_memory()  # then give its memory back
            compare.state = "done"
        except Exception as exc:  # a failed compare is reported, the server goes on
            log.exception("compare %d failed", compare.id)
            compare.state, compare.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            compare.running, compare.finished_at = None, time.time()
            if compare.state == "done":
                self._latest_done = compare

    def _run_side(self, compare: CompareState, side: CompareSide) -> dict:
        loading = time.monotonic()
        engine = self.make_engine(self.model, **{**self.options, **side.options()})
        records: list[dict] = []
        arrivals: list[dict] = []
        try:
            engine.wait_ready(LOAD_TIMEOUT_S)
            load_s = time.monotonic() - loading
            engine.set_min_step_interval(compare.min_step_s)
            engine.subscribe(lambda r: records.append(_compact(r if isinstance(r, dict) else r.to_dict())))
            engine.subscribe_events(lambda e: arrivals.append(_arrival(e)) if e["kind"] == "arrival" else None)
            ids = Firing(LocalSubmitter(engine), TelemetryHub()).fire(list(compare.pattern.planned), owner=None)
            if not engine.wait_for(ids, {"finished"}, self.run_timeout_s):
                raise TimeoutError(f"side {side.label}: not finished after {self.run_timeout_s:.0f} s")
            header = engine.info().trace_header
        finally:
            engine.shutdown()
        return {"label": side.label, "config": side.options(), "load_s": round(load_s, 2),
                "records": list(records), "arrivals": list(arrivals),
                "hardware": header.get("hardware", {}), "model": header.get("model", {}).get("name")}


def _compact(record: dict) -> dict:
    """A record without its per-block lists (the compare draws rows and times, not the pool)."""
    kv = record["kv"]
    return {**record, "block_tables": {}, "kv": {k: kv[k] for k in ("num_blocks", "block_size",
                                                                   "num_free", "num_cached")}}


def _arrival(event: dict) -> dict:
    return {"kind": "arrival", "request_id": event["request_id"], "time": event["time"],
            "num_prompt_tokens": event.get("num_prompt_tokens", 0)}


def _result_json(compare: CompareState, model: str) -> dict:
    pattern = compare.pattern
    return {"id": compare.id, "model": model, "order": "one after the other",
            "pattern": {"kind": pattern.kind, "name": pattern.name, "title": pattern.title,
                        "capped": pattern.capped, "requests": pattern.describe()},
            "sides": compare.results, "min_step_ms": round(compare.min_step_s * 1000),
            "started_at": compare.started_at,
            "finished_at": compare.finished_at}
