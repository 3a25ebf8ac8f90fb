"""Fanout: where the engine thread's output goes.

Each request's deltas go to its ``RequestStream``; each step's record goes, as one dict built
once and shared, to every record subscriber; arrivals and deltas go as RequestEvent dicts to
every event subscriber; every state change goes to the ``RequestStates``; and the deltas
themselves to ``on_deltas`` (the solo check's ``RunLog``) when given.
Subscribers run on the engine thread and must only hand data off. The subscriber lists are
replaced, never mutated, so the engine thread reads them without a lock.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .llm_engine import StepResult
from .outputs import RequestDelta
from .request import Request
from .request_states import RequestStates
from .request_stream import RequestStream, put_all
from .telemetry import RequestEvent

log = logging.getLogger(__name__)
Listener = Callable[[dict], None]


class Fanout:
    def __init__(self, states: RequestStates,
                 on_deltas: Callable[[list[RequestDelta]], None] | None = None):
        self.states = states
        self.on_deltas = on_deltas
        self._lock = threading.Lock()
        self._streams: dict[str, RequestStream] = {}
        self._listeners: dict[str, list[Listener]] = {"record": [], "event": []}

    # ---- streams ---------------------------------------------------------------------------
    def open(self, request: Request) -> RequestStream:
        """A stream for a request about to be queued; it counts as waiting from now on."""
        stream = RequestStream(request)
        with self._lock:
            if request.request_id in self._streams:
                raise ValueError(f"request_id {request.request_id!r} is already in use")
            self._streams[request.request_id] = stream
        self.states.arrived(request.request_id)
        return stream

    def open_ids(self) -> list[str]:
        with self._lock:
            return list(self._streams)

    def deliver(self, deltas: list[RequestDelta]) -> None:
        with self._lock:
            deliveries = [(stream, d) for d in deltas if (stream := self._streams.get(d.request_id))]
            for delta in deltas:
                if delta.finished:
                    self._streams.pop(delta.request_id, None)
        if self.on_deltas is not None:
            self.on_deltas(deltas)
        self.states.finish(d.request_id for d in deltas if d.finished)
        if self._listeners["event"]:  # before the streams: a reader who saw the end finds it here
            now = time.time()
            for d in deltas:
                self._emit(RequestEvent("delta", d.request_id, now, token_ids=d.token_ids, text=d.text,
                                        finished=d.finished, finish_reason=d.finish_reason, error=d.error))
        put_all(deliveries)

    def fail(self, request_ids: list[str], reason: str, message: str) -> None:
        """End these requests' streams with ``reason`` ("error" or "abort") and ``message``."""
        self.deliver([RequestDelta(rid, [], "", True, reason, message) for rid in request_ids])

    # ---- records and events ------------------------------------------------------------------
    def arrival(self, request: Request, prompt_text: str | None) -> None:
        self._emit(RequestEvent("arrival", request.request_id, time.time(), prompt=prompt_text,
                                num_prompt_tokens=request.num_prompt_tokens))

    def step(self, result: StepResult) -> None:
        record = result.record
        self.states.update({rid: state.status for rid, state in record.requests.items()})
        self.deliver(result.deltas)
        self._publish("record", record)

    def _emit(self, event: RequestEvent) -> None:
        self._publish("event", event)

    def _publish(self, kind: str, item) -> None:
        """``item.to_dict()``, built once and shared, to every listener of ``kind``."""
        listeners = self._listeners[kind]
        if not listeners:
            return
        data = item.to_dict()
        for callback in listeners:
            try:
                callback(data)
            except Exception:
                log.exception("%s subscriber failed", kind)

    def subscribe(self, kind: str, callback: Listener) -> Callable[[], None]:
        """Add a listener of ``kind`` ("record" or "event"); returns a function removing it."""
        with self._lock:
            self._listeners[kind] = [*self._listeners[kind], callback]

        def remove() -> None:
            with self._lock:
                self._listeners[kind] = [c for c in self._listeners[kind] if c is not callback]

        return remove
