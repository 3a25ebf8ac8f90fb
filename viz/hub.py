"""TelemetryHub: from one engine (or a replayed trace) to many browsers, never the other way.

Producers call ``publish_record(record_dict)`` and ``publish_event(event_dict)`` from any
thread (the engine thread for a live engine, a player thread for a replay); both only append
under a short lock, so the engine never waits for a viewer. ``run()``, a task on the server's
event loop, wakes ``fps`` times a second, coalesces what arrived into one frame per audience
and pushes it into each viewer's bounded outbox (see viewer.py).

Messages (protocol v2, JSON text), the same on the websocket /ws/telemetry and on the SSE
stream /telemetry/stream (transport.py):

- ``{"type": "snapshot", "viewer": id, "meta": {...}, "status": {...}, "requests": [entry...],
  "records": [record...]}``: the whole state, replacing what the viewer had: first message,
  after ``reset()`` and after dropped frames. ``viewer`` is this connection's opaque id (the
  replay controls take it); ``meta`` what the views draw with that no record holds:
  ``{"palette": [hex x12], "free_color", "cached_color", "phases": [{"name", "color"}],
  "source": {"engine", "engine_version", "model"}, "budget_hint"?}`` (colors.py).
  ``requests`` are RequestBook entries (with ``mine`` and ``visible`` instead of the owner);
  ``records`` the most recent IterationRecord dicts (up to ``history``, 40).
- ``{"type": "frame", "seq": int, "status": {...}, "records": [record...],
  "records_dropped": int, "events": [event...]}``: what happened since the previous frame.
  Records are IterationRecord dicts (engine/telemetry.py), in step order, at most
  ``max_records_per_frame`` of the latest; ``records_dropped`` counts the older ones of the
  tick left out (their steps are missing from the sequence). Events are RequestEvent
  dicts plus ``color``, ``label``, ``offset``/``token_offset`` (deltas: where their text and
  tokens start in the output), ``mine`` and ``visible``. Text of requests the viewer may not
  read is removed (privacy.py). Viewers that would get the same bytes share one serialisation,
  and each record's bulk (all but ``sampled``) is serialised once per tick for all of them.
- ``status``: ``{"source": "live" | "replay" | ..., "state", "model", "load_seconds",
  "load_error", "paused", "counts": {"pending", "waiting", "running"}, "engine": {"name",
  "version"}, "shared_view", "viewers"}`` (+ ``"replay"`` in a replay); sent in a frame at
  least once a second even when nothing happens, so a silent connection is a dead one.
  ``pending``: fired from the dashboard, not yet handed to the engine; ``waiting``: in the
  engine's queue; ``running``: scheduled (prefilling or decoding).
- ``{"type": "ping"}`` may come from either transport; clients ignore it.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import TYPE_CHECKING

from . import frames
from .book import RequestBook
from .colors import view_meta
from .privacy import PUBLIC, Audience
from .viewer import Viewer

if TYPE_CHECKING:  # a replay runs without the engine (and torch)
    from engine.telemetry import IterationRecord

log = logging.getLogger(__name__)
StatusProvider = Callable[[], dict]
MetaProvider = Callable[[], dict]
MAX_PENDING_EVENTS = 8192
RECENT_FINISHED = 1024  # finished requests whose status ``wait_for_status`` still knows
STATUS_INTERVAL_S = 1.0  # a frame at least this often, even with nothing new
ENGINE_NAME, ENGINE_VERSION = "batchscope", "1"


class TelemetryHub:
    def __init__(self, shared_view: bool = False, fps: float = 25.0, outbox_frames: int = 16,
                 history: int = 40, max_records_per_frame: int = 16, public: bool = False):
        """``public``: every request nobody claimed is readable by every viewer (a replayed
        trace holds only the text its recorder was allowed to keep)."""
        self.shared_view = shared_view
        self.frame_interval = 1.0 / fps
        self.outbox_frames = outbox_frames
        self.max_records_per_frame = max_records_per_frame
        self._cond = threading.Condition()
        self._book = RequestBook(default_owner=PUBLIC if public else None)
        # what arrived since the last tick: enough for the history, frames take the latest
        self._pending_records: deque[dict] = deque(maxlen=max(history, max_records_per_frame))
        self._records_arrived = 0
        self._pending_events: deque[dict] = deque(maxlen=MAX_PENDING_EVENTS)
        self._events_lost = False
        self._statuses: dict[str, str] = {}  # request id -> latest status seen in a record
        self._finished: deque[str] = deque()  # the finished ids in _statuses, oldest first
        self._history: deque[dict] = deque(maxlen=history)
        self._reset_pending = False
        self._viewers: list[Viewer] = []
        self._status_provider: StatusProvider = lambda: {"source": "none", "state": "idle"}
        self._meta_provider: MetaProvider = dict
        self._seq = 0
        self._last_status = 0.0
        self._task: asyncio.Task | None = None

    # ---- producers (any thread; never block) ---------------------------------------------
    def attach(self, llm, pending: Callable[[], int] = lambda: 0) -> Callable[[], None]:
        """Feed this hub from a live AsyncLLM; returns a function that detaches it.
        ``pending()``: requests fired from the dashboard not yet handed to the engine."""
        started = time.monotonic()
        self.set_status_provider(lambda: _engine_status(llm, started, pending()))
        self.set_meta_provider(lambda: _engine_meta(llm))
        unsubscribe_records = llm.subscribe(self._accept_record)
        unsubscribe_events = llm.subscribe_events(lambda event: self.publish_event(event.to_dict()))

        def detach() -> None:
            unsubscribe_records()
            unsubscribe_events()

        return detach

    def set_status_provider(self, provider: StatusProvider) -> None:
        """What the status line shows (a replay sets its own: source, position, speed)."""
        self._status_provider = provider

    def set_meta_provider(self, provider: MetaProvider) -> None:
        """The snapshot's ``meta`` (colors.view_meta of the source)."""
        self._meta_provider = provider

    def publish_record(self, record: dict) -> None:
        """One IterationRecord dict, as from ``IterationRecord.to_dict()``."""
        self._accept_record(record)

    def _accept_record(self, record: IterationRecord | dict) -> None:
        """A live engine hands its record object over as is (see ``_shallow``)."""
        requests = record["requests"] if isinstance(record, dict) else record.requests
        statuses = {rid: state["status"] if isinstance(state, dict) else state.status
                    for rid, state in requests.items()}
        with self._cond:
            self._pending_records.append(record)
            self._records_arrived += 1
            self._update_statuses(statuses)
            self._cond.notify_all()

    def _update_statuses(self, statuses: dict[str, str]) -> None:
        """Keep every live request's status but only the ``RECENT_FINISHED`` latest finished."""
        for rid, status in statuses.items():
            if status == "finished" and self._statuses.get(rid) != "finished":
                self._finished.append(rid)
            self._statuses[rid] = status
        while len(self._finished) > RECENT_FINISHED:
            self._statuses.pop(self._finished.popleft(), None)

    def publish_event(self, event: dict) -> None:
        """One RequestEvent dict (arrival or delta), as from ``RequestEvent.to_dict()``."""
        with self._cond:
            if len(self._pending_events) == MAX_PENDING_EVENTS:
                self._events_lost = True  # viewers resync from the book
            self._pending_events.append(self._book.apply(event))

    def claim(self, request_id: str, owner: str | None, label: str | None = None) -> None:
        """Record who fired ``request_id`` (before submitting it, so no event goes out
        unowned); ``privacy.PUBLIC`` lets every viewer read it."""
        with self._cond:
            self._book.claim(request_id, owner, label)

    def claimed(self, request_id: str) -> tuple[str | None, str | None]:
        """The (owner, label) ``claim`` gave ``request_id``; (None, None) if none (a recorder
        keeps only the text its visitor may read)."""
        with self._cond:
            return self._book.owner(request_id), self._book.label(request_id)

    def reset(self) -> None:
        """Forget all requests and history (a replay seeking backwards); viewers start over."""
        with self._cond:
            self._book.clear()
            self._statuses.clear()
            self._finished.clear()
            self._pending_records.clear()
            self._records_arrived = 0
            self._pending_events.clear()
            self._reset_pending = True
            self._cond.notify_all()

    # ---- queries for firing code ---------------------------------------------------------
    def wait_for_status(self, request_ids: Iterable[str], statuses: set[str],
                        timeout: float) -> bool:
        """Block until every request's latest status is in ``statuses`` (True) or timeout."""
        ids = list(request_ids)
        with self._cond:
            return self._cond.wait_for(
                lambda: all(self._statuses.get(rid) in statuses for rid in ids), timeout)

    # ---- viewers (event-loop thread) -----------------------------------------------------
    def connect(self, owner: str | None) -> Viewer:
        self.start()
        owner = owner if owner and owner != PUBLIC else None
        viewer = Viewer(Audience(owner, self.shared_view), capacity=self.outbox_frames)
        self._viewers.append(viewer)
        return viewer

    def disconnect(self, viewer: Viewer) -> None:
        if viewer in self._viewers:
            self._viewers.remove(viewer)

    @property
    def viewers(self) -> list[Viewer]:
        return list(self._viewers)

    def snapshot(self, viewer: Viewer) -> str:
        audience = viewer.audience
        with self._cond:
            entries = [e.to_dict() for e in self._book.entries()]
            owner_of = self._book.owner
            history = list(self._history)
            records = _records_json([frames.RecordBody.of(r) for r in history], history,
                                    audience, owner_of)
        return frames.json_object({
            "type": "snapshot",
            "viewer": viewer.id,
            "meta": self._meta_provider(),
            "status": self.status(),
            "requests": [audience.entry(e) for e in entries],
        }, records=records)

    def status(self) -> dict:
        return {"shared_view": self.shared_view, "viewers": len(self._viewers),
                **self._status_provider()}

    async def run(self) -> None:
        """The frame pump: one tick per frame interval, for the life of the server. A tick
        that fails is logged and its content dropped; every viewer then resyncs."""
        while True:
            await asyncio.sleep(self.frame_interval)
            try:
                self.tick()
            except Exception:
                log.exception("telemetry hub: a frame failed; viewers resync without it")
                self._resync_all(forget_history=True)

    def _resync_all(self, forget_history: bool = False) -> None:
        if forget_history:
            with self._cond:
                self._history.clear()
        for viewer in self._viewers:
            viewer.needs_snapshot = True
            viewer.wake()

    def tick(self) -> None:
        """Coalesce what arrived since the last tick into one frame per audience."""
        with self._cond:
            records = [_shallow(r) for r in self._pending_records]
            arrived, self._records_arrived = self._records_arrived, 0
            events = list(self._pending_events)
            self._pending_records.clear()
            self._pending_events.clear()
            owners = {e.request_id: e.owner for e in self._book.entries()}
            reset, self._reset_pending = self._reset_pending, False
            lost, self._events_lost = self._events_lost, False
            if reset:
                self._history.clear()
            self._history.extend(records)
        if reset or lost:
            self._resync_all()
        now = time.monotonic()
        if not records and not events and now - self._last_status < STATUS_INTERVAL_S:
            return
        self._last_status = now
        self._seq += 1
        self._push_frames(records[-self.max_records_per_frame:], arrived, events, owners)

    def _push_frames(self, records: list[dict], arrived: int, events: list[dict],
                     owners: dict[str, str | None]) -> None:
        status = self.status()
        bodies = [frames.RecordBody.of(r) for r in records] if self._viewers else []
        owner_of = lambda rid: owners.get(rid, self._book.default_owner)
        in_view = set(owners.values()) | {e.get("owner") for e in events}
        messages: dict[Audience, str] = {}
        for viewer in self._viewers:
            audience = viewer.audience.among(in_view)
            if audience not in messages:
                messages[audience] = frames.json_object({
                    "type": "frame",
                    "seq": self._seq,
                    "status": status,
                    "records_dropped": arrived - len(records),
                    "events": [audience.event(e) for e in events],
                }, records=_records_json(bodies, records, audience, owner_of))
            viewer.push(messages[audience])

    def start(self) -> None:
        """Start the frame pump on the running event loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="telemetry-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None


def _shallow(record: IterationRecord | dict) -> dict:
    """A record as a dict whose nested parts may still be dataclasses. A live record is
    fresh each step and never changed afterwards, so nothing is copied: ``to_dict()`` would
    deep-copy the O(pool size) KV lists of every step on the server's event loop."""
    if isinstance(record, dict):
        return record
    return {f.name: getattr(record, f.name) for f in fields(record)}


def _records_json(bodies: list[frames.RecordBody], records: list[dict], audience: Audience,
                  owner_of: Callable[[str], str | None]) -> str:
    return frames.json_array([
        body.with_sampled(audience.sampled(record.get("sampled") or {}, owner_of))
        for body, record in zip(bodies, records, strict=True)])


def _engine_status(llm, started: float, pending: int) -> dict:
    engine = llm.engine
    loading = llm.state == "loading"
    last = llm.last_record
    return {
        "source": "live",
        "state": llm.state,
        "model": engine.model_name if engine is not None else llm.model,
        "load_seconds": round(time.monotonic() - started, 1) if loading else None,
        "load_error": llm.load_error,
        "paused": llm.paused,
        "counts": {"pending": pending, "waiting": last.num_waiting if last else 0,
                   "running": last.num_running if last else 0},
        "engine": {"name": ENGINE_NAME, "version": ENGINE_VERSION},
    }


def _engine_meta(llm) -> dict:
    from engine.telemetry import PHASES

    engine = llm.engine
    model = engine.model_name if engine is not None else llm.model
    return view_meta(PHASES, {"engine": ENGINE_NAME, "engine_version": ENGINE_VERSION,
                              "model": model}, llm.config.max_num_batched_tokens)
