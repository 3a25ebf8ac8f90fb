"""IngestSource: a RecordSource fed by an engine in another process over a websocket.

The vLLM plugin (integrations/vllm, protocol in ``batchscope_vllm/sender.py``) connects to
``/ingest``, says hello with the shared token and what it is, and streams one record per engine
step. This source checks the token (constant-time), validates every record with
``engine.telemetry.validate_record`` and hands the good ones to its subscribers; bad records,
bad JSON and unknown messages are dropped and counted, never raised. One engine at a time: a
second producer is refused with 4409 while the first is connected (a restarted vLLM connects
again once its old connection is gone). Attach mode's own client (prompts sent to vLLM's API,
viz/remote/) publishes its RequestEvents through ``publish_event`` and registers the engine ids
of its requests in ``aliases``, so records name them as the dashboard does (request_aliases.py).

States (``status()["state"]``): "loading" until an engine has said hello, "ready" while one is
connected, "dead" after it went away (``error`` says so; back to "ready" when one returns),
"stopped" after ``close()``. While loading, ``load_seconds`` counts the wait. Steps only grow:
an engine that restarted while Batchscope ran continues the step numbers where the last one
stopped (views skip steps they have drawn; traces need growing steps). ``status()`` also
carries ``"ingest"``: the counters of ``IngestStats`` (records taken, invalid messages dropped,
connections refused, records the engine's own queue dropped). ``counts()`` are what the cards
show (shown_queues.py): a prompt fired from the dashboard is waiting from its arrival event, before
vLLM's next record lists it.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import FastAPI, WebSocket

from engine.record_source import SourceInfo, Unsubscribe
from engine.telemetry import upgrade_record, validate_record

from .request_aliases import RequestAliases
from .shown_queues import ShownQueues

PROTOCOL = 1
HELLO_TIMEOUT = 10.0  # seconds for a new connection to say hello
CLOSE_BAD_HELLO, CLOSE_BAD_TOKEN, CLOSE_BUSY = 4400, 4401, 4409
log = logging.getLogger(__name__)


class Refused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


@dataclass
class IngestStats:
    records: int = 0  # accepted and published
    invalid: int = 0  # messages dropped here: bad JSON, failed validation, unknown type
    dropped_by_engine: int = 0  # what the producer's queue dropped (its latest stats message)
    refused: int = 0  # connections refused (token, hello, busy)
    connections: int = 0  # producers welcomed so far
    last_error: str | None = field(default=None, repr=False)

    def counters(self) -> dict[str, int]:
        return {"records": self.records, "invalid": self.invalid, "refused": self.refused,
                "dropped_by_engine": self.dropped_by_engine, "connections": self.connections}


class IngestSource:
    def __init__(self, token: str, *, can_fire: bool = False, engine: str = "vllm") -> None:
        if not token:
            raise ValueError("the ingest needs a token (--ingest-token)")
        self._token = token.encode()
        self._can_fire = can_fire
        self._info = SourceInfo(engine=engine, engine_version="", model="", phases=())
        self._lock = threading.Lock()
        self._record_subscribers: tuple[Callable[[dict], None], ...] = ()
        self._event_subscribers: tuple[Callable[[dict], None], ...] = ()
        self._producer: object | None = None
        self._queues = ShownQueues()
        self._state, self._error = "loading", None
        self._started, self._load_seconds = time.monotonic(), None
        self._attached = threading.Event()
        self._last_step: int | None = None
        self._step_offset, self._new_producer = 0, False
        self.stats = IngestStats()
        self.aliases = RequestAliases()

    # ---- RecordSource -------------------------------------------------------------------------
    def subscribe(self, on_record: Callable[[dict], None]) -> Unsubscribe:
        return self._add("_record_subscribers", on_record)

    def subscribe_events(self, on_event: Callable[[dict], None]) -> Unsubscribe:
        return self._add("_event_subscribers", on_event)

    def info(self) -> SourceInfo:
        return self._info

    def status(self) -> dict:
        waited = round(time.monotonic() - self._started, 1) if self._state == "loading" else None
        return {"state": self._state, "error": self._error, "paused": False,
                "load_seconds": self._load_seconds if waited is None else waited,
                "ingest": self.stats.counters()}

    def wait_ready(self, timeout: float | None = None) -> SourceInfo:
        """Block until an engine is attached; TimeoutError after ``timeout`` seconds,
        RuntimeError once the source is closed."""
        if not self._attached.wait(timeout):
            raise TimeoutError(f"no engine attached within {timeout} s")
        if self._state == "stopped":
            raise RuntimeError("the ingest is closed")
        return self._info

    def counts(self) -> dict[str, int]:
        return self._queues.counts()

    def publish_event(self, event: dict) -> None:
        """A RequestEvent from this process (attach mode's API client) to the subscribers."""
        self._queues.on_event(event)
        _deliver(self._event_subscribers, event)

    def close(self) -> None:
        with self._lock:
            self._state, self._producer = "stopped", None
        self._attached.set()

    # ---- the producer's connection ----------------------------------------------------------
    def open(self, hello: object) -> Producer:
        """Check a hello; raise Refused with the close code, else hold the producer slot."""
        try:
            info = self._check_hello(hello)
        except Refused:
            self.stats.refused += 1
            raise
        producer = Producer(self)
        with self._lock:
            if self._state == "stopped":
                raise Refused(1001, "Batchscope is stopping")
            if self._producer is not None:
                self.stats.refused += 1
                raise Refused(CLOSE_BUSY, "another engine is attached")
            self._producer, self._info = producer, info
            self._new_producer = True
            self._state, self._error = "ready", None
            if self._load_seconds is None:
                self._load_seconds = round(time.monotonic() - self._started, 3)
            self.stats.connections += 1
        self._queues.clear()  # an engine that (re)attaches holds none of the requests counted before
        self._attached.set()
        log.info("ingest: %s %s attached (%s)", info.engine, info.engine_version, info.model)
        return producer

    def _check_hello(self, hello: object) -> SourceInfo:
        if not isinstance(hello, dict) or hello.get("type") != "hello":
            raise Refused(CLOSE_BAD_HELLO, "the first message must be a hello")
        token = hello.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self._token):
            raise Refused(CLOSE_BAD_TOKEN, "bad or missing ingest token")
        if hello.get("protocol") != PROTOCOL:
            raise Refused(CLOSE_BAD_HELLO,
                          f"ingest protocol {hello.get('protocol')!r} is not {PROTOCOL}")
        try:
            return _source_info(hello, self._can_fire)
        except (KeyError, TypeError, ValueError) as exc:
            raise Refused(CLOSE_BAD_HELLO, f"hello: {exc}") from None

    def _receive(self, text: object) -> None:
        message = _json(text)
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "record":
            self._accept(message.get("data"))
        elif kind == "stats" and isinstance(message.get("dropped"), int):
            self.stats.dropped_by_engine = message["dropped"]
        else:
            self.stats.invalid += 1

    def _accept(self, record: object) -> None:
        try:
            validate_record(record)
        except Exception as exc:  # noqa: BLE001 (any way a foreign record breaks is "invalid")
            self.stats.invalid += 1
            self.stats.last_error = str(exc)[:200]
            return
        record = self._numbered(self.aliases.rename(upgrade_record(record)))
        self._queues.on_record(record)
        self.stats.records += 1
        _deliver(self._record_subscribers, record)

    def _numbered(self, record: dict) -> dict:
        """Steps only grow: an engine that restarted (its first step not after the last one
        seen) continues the numbering. Jumps forward stay: they are records the engine dropped."""
        if self._new_producer:
            self._new_producer = False
            last = self._last_step
            self._step_offset = last + 1 - record["step"] if last is not None and record["step"] <= last else 0
        if self._step_offset:
            record = {**record, "step": record["step"] + self._step_offset}
        self._last_step = record["step"]
        return record

    def _release(self, producer: Producer) -> None:
        with self._lock:
            if self._producer is not producer:
                return
            self._producer = None
            if self._state == "ready":
                self._state = "dead"
                self._error = f"{self._info.engine} disconnected; waiting for it to come back"
        log.info("ingest: %s detached", self._info.engine)

    def _add(self, slot: str, callback: Callable[[dict], None]) -> Unsubscribe:
        with self._lock:
            setattr(self, slot, (*getattr(self, slot), callback))

        def unsubscribe() -> None:
            with self._lock:
                setattr(self, slot, tuple(c for c in getattr(self, slot) if c is not callback))

        return unsubscribe


class Producer:
    """One welcomed connection: feed it the messages that follow the hello, close it once."""

    def __init__(self, source: IngestSource) -> None:
        self._source = source

    def receive(self, text: object) -> None:
        self._source._receive(text)

    def close(self) -> None:
        self._source._release(self)


def _source_info(hello: dict, can_fire: bool) -> SourceInfo:
    engine, info = hello["engine"], hello["info"]
    optional = {name: _optional_int(info.get(name))
                for name in ("block_size", "num_kv_blocks", "max_model_len")}
    header = info.get("trace_header") or {}
    if not isinstance(header, dict):
        raise TypeError("trace_header must be an object")
    return SourceInfo(engine=str(engine["name"]), engine_version=str(engine["version"]),
                      model=str(info["model"]), phases=tuple(str(p) for p in info["phases"]),
                      trace_header=header, can_fire=can_fire, **optional)


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _deliver(subscribers: tuple[Callable[[dict], None], ...], data: dict) -> None:
    for callback in subscribers:
        try:
            callback(data)
        except Exception:  # a failing subscriber must not stop the others or the ingest
            log.exception("ingest: a subscriber failed")


# ---- the websocket endpoint (Starlette/FastAPI) --------------------------------------------
def install_ingest(app: FastAPI, source: IngestSource, path: str = "/ingest") -> None:
    """The producers' websocket on ``app`` (before anything is mounted at "/")."""
    @app.websocket(path)
    async def ingest(websocket: WebSocket) -> None:
        await serve_ingest(websocket, source)


async def serve_ingest(websocket, source: IngestSource) -> None:
    """Run one producer connection: ``app.websocket("/ingest")`` hands its socket here."""
    await websocket.accept()
    try:
        first = await asyncio.wait_for(websocket.receive(), HELLO_TIMEOUT)
        if first["type"] == "websocket.disconnect":
            return
        producer = source.open(_json(first.get("text")))
    except Refused as refusal:
        await websocket.close(code=refusal.code, reason=refusal.reason)
        return
    except TimeoutError:
        await websocket.close(code=CLOSE_BAD_HELLO, reason="no hello")
        return
    try:
        await websocket.send_text(json.dumps({"type": "welcome"}))
        while (message := await websocket.receive())["type"] != "websocket.disconnect":
            producer.receive(message.get("text"))
    finally:
        producer.close()


def _json(text: object) -> object:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None
