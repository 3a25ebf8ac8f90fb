"""IngestSource: a RecordSource fed by an engine in another process over a websocket.

The vLLM plugin (integrations/vllm, protocol in ``batchscope_vllm/sender.py``) connects to
``/ingest``, says hello with the shared token and what it is, and streams one record per engine
step. This source checks the token (constant-time), validates every record with
``engine.telemetry.validate_record`` and hands the good ones to its subscribers; bad records,
bad JSON and unknown messages are dropped and counted, never raised. One engine at a time, with
one producer per data-parallel rank: vLLM with ``--data-parallel-size N`` runs a scheduler per
rank, each with its own tap and connection (hello: ``engine.data_parallel_rank``, and
``info.trace_header.engine.data_parallel_size`` when the producer knows it: vLLM's engine core of
a dense model does not, its config says 1 for every rank, so the ranks seen stand for the size).
Another engine (name, version, model or size differ), or a second producer for a rank already
attached, is refused with 4409 while the first is connected (a restarted vLLM connects again
once its old connection is gone). Attach mode's own client (prompts sent to vLLM's API,
viz/remote/) publishes its RequestEvents through
``publish_event`` and registers the engine ids of its requests in ``aliases``, so records name
them as the dashboard does (request_aliases.py).

States (``status()["state"]``): "loading" until an engine has said hello, "ready" while one (or
one of its ranks) is connected, "dead" after it went away (``error`` says so; back to "ready"
when one returns), "stopped" after ``close()``. While loading, ``load_seconds`` counts the wait.
Steps only grow: the ranks' records merge into one stream numbered in arrival order (a rank's
own step number goes to ``source.rank_step``, its rank to ``source.data_parallel_rank`` when the
record lacks it), and an engine that restarted while Batchscope ran continues the step numbers
where the last one stopped (views skip steps they have drawn; traces need growing steps); a
jump in a producer's own steps (records its queue dropped) stays a jump. ``status()`` also
carries ``"ingest"``: the counters of ``IngestStats`` (records taken, invalid messages dropped,
connections refused, records the engine's own queue dropped), and for a data-parallel engine
``"data_parallel"``: ``{"size", "ranks": [{"rank", "waiting", "running"}]}``, the ranks
attached and their counts (``size``: the engine's, else the highest rank seen plus one).
``counts()`` are what the cards show (engine/request_states.py): a prompt fired from the dashboard is
waiting from its arrival event, before vLLM's next record lists it.
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
from engine.request_states import RequestStates
from engine.telemetry import upgrade_record, validate_record

from .request_aliases import RequestAliases

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


@dataclass(frozen=True)
class Engine:
    """What a producer's hello says it is: ranks of one engine agree on all of it."""

    name: str
    version: str
    model: str
    data_parallel_size: int | None  # None: the hello does not say (its ranks tell)

    @property
    def data_parallel(self) -> bool:
        return (self.data_parallel_size or 1) > 1

    def __str__(self) -> str:
        ranks = f", data parallel {self.data_parallel_size}" if self.data_parallel else ""
        return f"{self.name} {self.version} ({self.model}{ranks})"


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
        self._engine: Engine | None = None  # the engine attached last
        self._ranks: dict[int, Producer] = {}  # data-parallel rank -> its producer, while attached
        self._seen_ranks: set[int] = set()  # of the engine attached last, attached or gone
        self._states = RequestStates()  # (the one reducer of request states: request_states.py)
        self._state, self._error = "loading", None
        self._started, self._load_seconds = time.monotonic(), None
        self._attached = threading.Event()
        self._last_step: int | None = None  # of the merged stream
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
        status = {"state": self._state, "error": self._error, "paused": False,
                  "load_seconds": self._load_seconds if waited is None else waited,
                  "ingest": self.stats.counters()}
        if ranks := self._ranks_status():
            status["data_parallel"] = ranks
        return status

    def _ranks_status(self) -> dict | None:
        """The ranks of a data-parallel engine attached now, with their counts; None for one
        engine with one rank, or none."""
        with self._lock:
            ranks, engine, data_parallel = sorted(self._ranks), self._engine, self._data_parallel()
            size = engine.data_parallel_size if engine else None
            size = size or max(self._seen_ranks, default=0) + 1
        if not ranks or not data_parallel:
            return None
        counts = self._states.by_rank(ranks)
        return {"size": size, "ranks": [{"rank": rank, **counts[rank]} for rank in ranks]}

    def _data_parallel(self) -> bool:
        """Whether the engine attached last runs data parallel: it says so, or more than rank 0
        of it attached. Called under the lock."""
        engine = self._engine
        return bool(engine and engine.data_parallel) or bool(self._seen_ranks - {0})

    def wait_ready(self, timeout: float | None = None) -> SourceInfo:
        """Block until an engine is attached; TimeoutError after ``timeout`` seconds,
        RuntimeError once the source is closed."""
        if not self._attached.wait(timeout):
            raise TimeoutError(f"no engine attached within {timeout} s")
        if self._state == "stopped":
            raise RuntimeError("the ingest is closed")
        return self._info

    def counts(self) -> dict[str, int]:
        return self._states.counts()

    def wait_for(self, request_ids: list[str], states: set[str], timeout: float) -> bool:
        """Block until every request is in one of ``states`` (as the cards show them)."""
        return self._states.wait_for(request_ids, states, timeout)

    def publish_event(self, event: dict) -> None:
        """A RequestEvent from this process (attach mode's API client) to the subscribers."""
        self._states.on_event(event)
        _deliver(self._event_subscribers, event)

    def close(self) -> None:
        with self._lock:
            self._state = "stopped"
            self._ranks.clear()
        self._attached.set()

    # ---- the producer's connection ----------------------------------------------------------
    def open(self, hello: object) -> Producer:
        """Check a hello; raise Refused with the close code, else hold its rank's slot."""
        try:
            info, engine, rank = self._check_hello(hello)
            producer = self._attach(info, engine, rank)
        except Refused:
            self.stats.refused += 1
            raise
        self._attached.set()
        log.info("ingest: %s attached%s", engine, f" (rank {rank})" if producer.data_parallel else "")
        return producer

    def _attach(self, info: SourceInfo, engine: Engine, rank: int) -> Producer:
        """Take ``rank``'s slot for ``engine``, or raise Refused saying why not."""
        with self._lock:
            if self._state == "stopped":
                raise Refused(1001, "Batchscope is stopping")
            if busy := self._busy(engine, rank):
                raise Refused(CLOSE_BUSY, busy)
            alone = not self._ranks
            if alone and engine != self._engine:
                self._seen_ranks = set()
            if alone:
                self._engine, self._info = engine, info
            self._seen_ranks.add(rank)
            producer = Producer(self, rank)
            self._ranks[rank] = producer
            self._state, self._error = "ready", None
            if self._load_seconds is None:
                self._load_seconds = round(time.monotonic() - self._started, 3)
            self.stats.connections += 1
        # an engine (or a rank) that (re)attaches holds none of the requests counted before
        self._states.clear(None if alone else rank)
        return producer

    def _busy(self, engine: Engine, rank: int) -> str | None:
        """Why ``rank`` of ``engine`` cannot attach beside the producers attached, or None."""
        if not self._ranks:
            return None
        if engine != self._engine:
            return f"another engine is attached: {self._engine}"
        if rank not in self._ranks:
            return None
        if self._data_parallel():
            return f"data-parallel rank {rank} of {engine} is already attached"
        return f"another engine is attached: {engine}"

    def _check_hello(self, hello: object) -> tuple[SourceInfo, Engine, int]:
        if not isinstance(hello, dict) or hello.get("type") != "hello":
            raise Refused(CLOSE_BAD_HELLO, "the first message must be a hello")
        token = hello.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self._token):
            raise Refused(CLOSE_BAD_TOKEN, "bad or missing ingest token")
        if hello.get("protocol") != PROTOCOL:
            raise Refused(CLOSE_BAD_HELLO,
                          f"ingest protocol {hello.get('protocol')!r} is not {PROTOCOL}")
        try:
            info = _source_info(hello, self._can_fire)
            rank, size = _rank_and_size(hello)
        except (KeyError, TypeError, ValueError) as exc:
            raise Refused(CLOSE_BAD_HELLO, f"hello: {exc}") from None
        return info, Engine(info.engine, info.engine_version, info.model, size), rank

    def _receive(self, producer: Producer, text: object) -> None:
        message = _json(text)
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "record":
            self._accept(producer, message.get("data"))
        elif kind == "stats" and isinstance(message.get("dropped"), int):
            self.stats.dropped_by_engine = message["dropped"]
        else:
            self.stats.invalid += 1

    def _accept(self, producer: Producer, record: object) -> None:
        try:
            validate_record(record)
        except Exception as exc:  # noqa: BLE001 (any way a foreign record breaks is "invalid")
            self.stats.invalid += 1
            self.stats.last_error = str(exc)[:200]
            return
        record = self._numbered(producer, self.aliases.rename(upgrade_record(record)))
        self._states.on_record(record)
        self.stats.records += 1
        _deliver(self._record_subscribers, record)

    def _numbered(self, producer: Producer, record: dict) -> dict:
        """The record with its step in the merged stream: steps only grow. A producer's first
        record follows the last step seen, unless it is alone and already past it; then each
        record moves on by as many steps as the producer's own did (a jump forward is records
        it dropped). A rank's own step goes to ``source.rank_step``."""
        own = record["step"]
        with self._lock:
            last, previous = self._last_step, producer.last_step
            alone = list(self._ranks.values()) == [producer]
            if previous is not None:
                step = last + max(1, own - previous)
            else:
                step = own if last is None or (alone and own > last) else last + 1
            self._last_step, producer.last_step = step, own
            data_parallel = producer.data_parallel = self._data_parallel()
        source = {"data_parallel_rank": producer.rank, **record["source"]}
        if data_parallel:
            source["rank_step"] = own
        return {**record, "step": step, "source": source}

    def _release(self, producer: Producer) -> None:
        with self._lock:
            if self._ranks.get(producer.rank) is not producer:
                return
            del self._ranks[producer.rank]
            if self._state == "ready" and not self._ranks:
                self._state = "dead"
                self._error = f"{self._info.engine} disconnected; waiting for it to come back"
        log.info("ingest: %s detached%s", self._engine, f" (rank {producer.rank})" if producer.data_parallel else "")

    def _add(self, slot: str, callback: Callable[[dict], None]) -> Unsubscribe:
        with self._lock:
            setattr(self, slot, (*getattr(self, slot), callback))

        def unsubscribe() -> None:
            with self._lock:
                setattr(self, slot, tuple(c for c in getattr(self, slot) if c is not callback))

        return unsubscribe


class Producer:
    """One welcomed connection (one data-parallel rank of the engine): feed it the messages
    that follow the hello, close it once."""

    def __init__(self, source: IngestSource, rank: int) -> None:
        self._source = source
        self.rank = rank
        self.data_parallel = rank > 0  # as its source judged it at its last record
        self.last_step: int | None = None  # its own step number of the last record it sent

    def receive(self, text: object) -> None:
        self._source._receive(self, text)

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


def _rank_and_size(hello: dict) -> tuple[int, int | None]:
    """The producer's data-parallel rank (0 when the hello names none) and the engine's data
    parallel size (None when its trace header does not say)."""
    rank = _optional_int(hello["engine"].get("data_parallel_rank")) or 0
    engine_header = (hello["info"].get("trace_header") or {}).get("engine") or {}
    size = _optional_int(engine_header.get("data_parallel_size"))
    if rank < 0 or (size is not None and rank >= size):
        raise ValueError(f"data_parallel_rank {rank} is not in 0..{(size or 1) - 1}"
                         f" (data_parallel_size {size})")
    return rank, size


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
