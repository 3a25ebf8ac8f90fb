"""TelemetryHub: from one engine (or a replayed trace) to many browsers, never the other way.

Producers call ``publish_record(record_dict)`` and ``publish_event(event_dict)`` from any
thread (the engine thread for a live engine, a player thread for a replay); both only append
under a short lock, so the engine never waits for a viewer. ``run()``, a task on the server's
event loop, wakes ``fps`` times a second, coalesces what arrived into one frame per audience
and pushes it into each viewer's bounded outbox (see viewer.py).

A room: every frame is sent once per viewer, and on a small machine the cores that sending takes
are the engine's (BENCHMARKS.md, "A room on one server": 500 viewers at 8 frames a second each
cost the engine a quarter of its tokens on 2 vCPUs). So the hub sends at most ``frames_per_s``
frames a second across all its viewers: with many viewers each gets fewer, larger frames (never
under one a second, never losing a record to the lower rate), and the status says the rate, so
the page can tell the room why it updates less often.

Messages (protocol v2, JSON text), the same on the websocket /ws/telemetry and on the SSE
stream /telemetry/stream (transport.py); a websocket opened with ``?compress=deflate-raw`` gets
each as a binary message, the text's raw DEFLATE bytes (frames.py):

- ``{"type": "snapshot", "viewer": id, "meta": {...}, "status": {...}, "requests": [entry...],
  "records": [record...]}``: the whole state, replacing what the viewer had: first message,
  after ``reset()`` and after dropped frames. ``viewer`` is this connection's opaque id (the
  replay controls take it); ``meta`` what the views draw with that no record holds:
  ``{"palette": [hex x12], "free_color", "cached_color", "phases": [{"name", "color"}],
  "source": {"engine", "engine_version", "model"}, "budget_hint"?}`` (viz/colors.py).
  ``requests`` are RequestBook entries (with ``mine`` and ``visible`` instead of the owner);
  ``records`` the recent IterationRecord dicts: back to the arrival of the oldest request a card
  shows, at least the latest 40, bounded in bytes (history.py).
- ``{"type": "frame", "seq": int, "status": {...}, "records": [record...],
  "records_dropped": int, "events": [event...]}``: what happened since the previous frame.
  Records are IterationRecord dicts (engine/telemetry.py), in step order, at most
  ``records_per_frame()`` of the latest (more when the rate is lowered); ``records_dropped``
  counts the older ones of the tick left out (their steps are missing from the sequence).
  Events are RequestEvent
  dicts plus ``color``, ``label``, ``offset``/``token_offset`` (deltas: where their text and
  tokens start in the output), ``mine`` and ``visible``; besides arrivals and deltas, a
  ``{"kind": "fired", "request_id", "time"}`` event announces a request fired from the
  dashboard that the engine does not have yet (pending until its arrival). Text of requests the viewer may not
  read is removed (privacy.py). Viewers that would get the same bytes share one serialisation
  and one compression (frames.Message),
  and each record's bulk (all but ``sampled``) is serialised once per tick for all of them.
- ``status``: ``{"source": "live" | "replay" | ..., "state", "error", "model",
  "load_seconds", "paused", "counts": {"pending", "waiting", "running"}, "engine": {"name",
  "version"}, "shared_view", "viewers", "frame_rate": {"now", "full"}}`` (+ ``"replay"`` in a
  replay; source_view.py); a
  ``state`` is "loading", "ready", "failed", "dead" or "stopped". Sent in a frame at
  least once a second even when nothing happens, so a silent connection is a dead one.
  ``pending``: fired from the dashboard, not yet handed to the engine; ``waiting``: in the
  engine's queue; ``running``: scheduled (prefilling or decoding).
- ``{"type": "ping"}`` may come from either transport; clients ignore it.
"""
from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import frames
from .book import RequestBook
from .history import KEEP, RecordHistory
from .privacy import PUBLIC, Audience
from .source_view import SourceView
from .viewer import Viewer

if TYPE_CHECKING:
    from engine.record_source import RecordSource

log = logging.getLogger(__name__)
StatusProvider = Callable[[], dict]
MetaProvider = Callable[[], dict]
MAX_PENDING_EVENTS = 8192
STATUS_INTERVAL_S = 1.0  # a frame at least this often, even with nothing new
FRAMES_PER_S = 2000.0  # frames a second across all viewers: 25 each up to 80 viewers, 4 at 500
SETTLE_TICKS = 3  # ticks after a reset that resync viewers left with a hole (_still_settling)


class TelemetryHub:
    def __init__(self, shared_view: bool = False, fps: float = 25.0, outbox_frames: int = 16,
                 history: int = KEEP, max_records_per_frame: int = 16, public: bool = False,
                 viewer_count: Callable[[], int] | None = None,
                 frames_per_s: float | None = FRAMES_PER_S):
        """``public``: every request nobody claimed is readable by every viewer (a replayed
        trace holds only the text its recorder was allowed to keep). ``viewer_count``: the
        number of viewers the status line shows, when this hub serves only some of them.
        ``fps``: frames a second for each viewer of a small audience; ``frames_per_s``: for all
        viewers together (None: no such limit)."""
        self.shared_view = shared_view
        self.fps = fps
        self.frames_per_s = frames_per_s
        self.outbox_frames = outbox_frames
        self.max_records_per_frame = max_records_per_frame
        self._lock = threading.Lock()
        self._book = RequestBook(default_owner=PUBLIC if public else None)
        # what arrived since the last tick: enough for the history, frames take the latest
        self._pending_records: deque[dict] = deque(maxlen=max(history, max_records_per_frame))
        self._records_arrived = 0
        self._pending_events: deque[dict] = deque(maxlen=MAX_PENDING_EVENTS)
        self._events_lost = False
        self._history = RecordHistory(keep=history)
        self._snapshot_tails: dict[Audience, frames.Message] = {}  # until the book or the history changes
        self._reset_pending = False
        # ticks after a reset that resync the viewers again if their frame does not carry every
        # record that arrived: a replay seek republishes the trace in one burst (a few ms), and a
        # viewer resynced inside it would hold its first part and then only the latest records
        self._settling = 0
        self._viewers: list[Viewer] = []
        self._status_provider: StatusProvider = lambda: {"source": "none", "state": "idle"}
        self._meta_provider: MetaProvider = dict
        self._seq = 0
        self._last_status = 0.0
        self._task: asyncio.Task | None = None
        self._viewer_count = viewer_count or (lambda: len(self._viewers))

    # ---- producers (any thread; never block) ---------------------------------------------
    def attach(self, source: RecordSource, pending: Callable[[], int] = lambda: 0,
               kind: str = "live") -> Callable[[], None]:
        """Feed this hub from a record source (a live engine, a replayed trace); returns a
        function that detaches it. ``pending()``: requests fired from the dashboard not yet
        handed to the engine; ``kind`` names the source in the status line."""
        view = SourceView(source, pending, kind)
        self.set_status_provider(view.status)
        self.set_meta_provider(view.meta)
        unsubscribe_records = source.subscribe(self.publish_record)
        unsubscribe_events = source.subscribe_events(self.publish_event)

        def detach() -> None:
            unsubscribe_records()
            unsubscribe_events()

        return detach

    def set_status_provider(self, provider: StatusProvider) -> None:
        """What the status line shows (``attach`` sets it from the source)."""
        self._status_provider = provider

    def set_meta_provider(self, provider: MetaProvider) -> None:
        """The snapshot's ``meta`` (colors.view_meta of the source)."""
        self._meta_provider = provider

    def publish_record(self, record: dict) -> None:
        """One IterationRecord dict (engine/telemetry.py), shared and never changed."""
        with self._lock:
            self._pending_records.append(record)
            self._records_arrived += 1

    def publish_event(self, event: dict) -> None:
        """One RequestEvent dict (arrival or delta, as from ``RequestEvent.to_dict()``, or
        ``fired``)."""
        with self._lock:
            if len(self._pending_events) == MAX_PENDING_EVENTS:
                self._events_lost = True  # viewers resync from the book
            self._pending_events.append(self._book.apply(event))
            self._snapshot_tails.clear()  # a snapshot shows the book as it is

    def fired(self, request_id: str, owner: str | None, label: str | None = None) -> None:
        """A request fired from the dashboard that the engine does not have yet: claimed, and
        shown to every viewer as pending (a ``fired`` event) until its arrival."""
        self.claim(request_id, owner, label)
        self.publish_event({"kind": "fired", "request_id": request_id, "time": time.time()})

    def claim(self, request_id: str, owner: str | None, label: str | None = None) -> None:
        """Record who fired ``request_id`` (before submitting it, so no event goes out
        unowned); ``privacy.PUBLIC`` lets every viewer read it."""
        with self._lock:
            self._book.claim(request_id, owner, label)
            self._snapshot_tails.clear()

    def claimed(self, request_id: str) -> tuple[str | None, str | None]:
        """The (owner, label) ``claim`` gave ``request_id``; (None, None) if none (a recorder
        keeps only the text its visitor may read)."""
        with self._lock:
            return self._book.owner(request_id), self._book.label(request_id)

    def reset(self) -> None:
        """Forget all requests and history (a replay seeking backwards); viewers start over."""
        with self._lock:
            self._book.clear()
            self._snapshot_tails.clear()
            self._pending_records.clear()
            self._records_arrived = 0
            self._pending_events.clear()
            self._reset_pending = True

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

    def snapshot(self, viewer: Viewer) -> frames.Message:
        """The viewer's first message (and its resync): its own head, then the requests and the
        history, which every viewer of its audience joining before the next change (an event, a
        claim, a step's record) shares, made and compressed once (a room opening the page at
        once: 500 snapshots of 1.4 MB each); a tail always shows the book as it is now."""
        head = frames.json_object({"type": "snapshot", "viewer": viewer.id, "meta": self._meta_provider(),
                                   "status": self.status()})
        return frames.Message(head[:-1] + ", ", self._snapshot_tail(viewer.audience))

    def _snapshot_tail(self, audience: Audience) -> frames.Message:
        with self._lock:
            entries = self._book.entries()
            audience = audience.among({e.owner for e in entries})
            tail = self._snapshot_tails.get(audience)
            if tail is None:
                history, bodies = self._history.items()
                records = _records_json(bodies, history, audience, self._book.owner)
                requests = frames.dumps([audience.entry(e.to_dict()) for e in entries])
                tail = frames.Message(f'"requests": {requests}, "records": {records}}}')
                self._snapshot_tails[audience] = tail
        return tail

    def status(self) -> dict:
        return {"shared_view": self.shared_view, "viewers": self._viewer_count(),
                "frame_rate": {"now": round(self.frame_rate(), 1), "full": self.fps},
                **self._status_provider()}

    def frame_rate(self) -> float:
        """Frames a second each viewer gets now: ``fps``, or less so that all viewers together
        get at most ``frames_per_s``; never under one a second (the status interval)."""
        if self.frames_per_s is None:
            return self.fps
        shared = self.frames_per_s / max(1, len(self._viewers))
        return max(1.0 / STATUS_INTERVAL_S, min(self.fps, shared))

    def records_per_frame(self) -> int:
        """``max_records_per_frame`` at the full rate, as many more as the rate is lower, up
        to what a tick keeps (the history's length: 40 steps a second at the lowest rate)."""
        scaled = math.ceil(self.max_records_per_frame * self.fps / self.frame_rate())
        return min(scaled, self._pending_records.maxlen)

    async def run(self) -> None:
        """The frame pump: one tick per frame interval, for the life of the server. A tick
        that fails is logged and its content dropped; every viewer then resyncs."""
        while True:
            await asyncio.sleep(1.0 / self.frame_rate())
            try:
                self.tick()
            except Exception:
                log.exception("telemetry hub: a frame failed; viewers resync without it")
                self._resync_all(forget_history=True)

    def _resync_all(self, forget_history: bool = False) -> None:
        if forget_history:
            with self._lock:
                self._history.clear()
                self._snapshot_tails.clear()
        for viewer in self._viewers:
            viewer.needs_snapshot = True
            viewer.wake()

    def tick(self) -> None:
        """Coalesce what arrived since the last tick into one frame per audience."""
        with self._lock:
            records = list(self._pending_records)
            arrived, self._records_arrived = self._records_arrived, 0
            events = list(self._pending_events)
            self._pending_records.clear()
            self._pending_events.clear()
            owners = {e.request_id: e.owner for e in self._book.entries()} if self._viewers else {}
            reset, self._reset_pending = self._reset_pending, False
            lost, self._events_lost = self._events_lost, False
            if records:
                self._snapshot_tails.clear()  # the history changes below
            if reset:
                self._history.clear()
        bodies = [frames.RecordBody.of(r) for r in records]  # (outside the lock: producers never wait)
        with self._lock:
            self._history.extend(records, bodies)
            self._history.trim(self._book.oldest_arrival_on_screen())
        latest = -self.records_per_frame()  # a frame carries the latest records only
        settling = self._still_settling(reset, hole=arrived > len(records[latest:]))
        if reset or lost or settling:
            self._resync_all()
        now = time.monotonic()
        if not records and not events and now - self._last_status < STATUS_INTERVAL_S:
            return
        self._last_status = now
        self._seq += 1
        if self._viewers:  # (with none, the history above is all a tick keeps: for those who join)
            self._push_frames(records[latest:], bodies[latest:], arrived, events, owners)

    def _still_settling(self, reset: bool, hole: bool) -> bool:
        """Whether this tick, one of the few after a reset, left a ``hole`` that viewers must resync
        over: more records arrived than its frame carries (the seek's burst is not over). Bounded:
        a replay played faster than a frame carries leaves holes by design, as a live engine does."""
        if reset:
            self._settling = SETTLE_TICKS
            return False
        if not self._settling:
            return False
        self._settling = self._settling - 1 if hole else 0
        return hole

    def _push_frames(self, records: list[dict], bodies: list[frames.RecordBody], arrived: int,
                     events: list[dict], owners: dict[str, str | None]) -> None:
        status = self.status()
        def owner_of(rid: str) -> str | None:
            return owners.get(rid, self._book.default_owner)

        in_view = set(owners.values()) | {e.get("owner") for e in events}
        messages: dict[Audience, frames.Message] = {}
        for viewer in self._viewers:
            audience = viewer.audience.among(in_view)
            if audience not in messages:
                messages[audience] = frames.Message(frames.json_object({
                    "type": "frame",
                    "seq": self._seq,
                    "status": status,
                    "records_dropped": arrived - len(records),
                    "events": [audience.event(e) for e in events],
                }, records=_records_json(bodies, records, audience, owner_of)))
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


def _records_json(bodies: list[frames.RecordBody], records: list[dict], audience: Audience,
                  owner_of: Callable[[str], str | None]) -> str:
    return frames.json_array([
        body.with_sampled(audience.sampled(record.get("sampled") or {}, owner_of))
        for body, record in zip(bodies, records, strict=True)])
