"""Trace files: a recorded run as JSON Lines (gzip when the name ends in ``.gz``).

Format ``batchscope-trace`` version 1, one JSON object per line:

- line 1, the header: ``{"type": "header", "format": "batchscope-trace", "version": 1,
  "schema_version": <engine telemetry schema>, "started_at": <epoch seconds>,
  "text": "full" | "redacted", "model": {"name", "config"}, "engine": {EngineConfig fields},
  "hardware": {"platform", "python", "cpu_count", "device", "torch", "gpu"}}``
- then, in the order the engine produced them, ``{"type": "record", "data": <IterationRecord
  dict>}`` for every step and ``{"type": "event", "data": <RequestEvent dict>}`` for every
  request arrival and text delta (both documented in engine/telemetry.py). Records have
  consecutive ``step`` numbers (a recording may start mid-run) except after a gap line. An
  arrival recorded from the dashboard may add ``"label"``: the short text its panel showed
  instead of the prompt.
- ``{"type": "gap", "lost": "record" | "event", "step": <int or null>, "time": <epoch s>,
  "error": str}`` where the writer could not write an entry: the recording goes on, and the
  gap says what is missing (``step``: the lost record's, when known) instead of leaving a
  silent hole. Replay and the exports show it.
- last line: ``{"type": "end", "records": <count>, "events": <count>, "gaps": <count>}``; a
  file without it was cut off.

``text`` says whose text the file holds: ``"full"`` every request's, ``"redacted"`` none,
``"own"`` only that of the requests the recording visitor could read (viz/live/privacy.py). For the
others the prompt and text are dropped and token ids become ``privacy.HIDDEN_TOKEN`` (so token
counts, TTFT and inter-token latency survive); layout, timing and KV state are always kept.

Reading validates every line and raises ``TraceError`` naming the line and what is wrong.
This module never imports torch, so replay starts without the engine.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

from engine import telemetry as schema  # plain data: no torch (engine/__init__ is lazy)
from engine.record_source import SourceInfo

from ..live.privacy import HIDDEN_TOKEN

FORMAT = "batchscope-trace"
FORMAT_VERSION = 1
TEXT_MODES = ("full", "redacted", "own")
EVENT_KINDS = ("arrival", "delta")
GZIP_MAGIC = b"\x1f\x8b"
log = logging.getLogger(__name__)
HEADER_KEYS = {  # what replay and the exports read from the header
    "model": ("name",),
    "engine": ("policy", "max_num_batched_tokens", "enable_chunked_prefill",
               "enable_prefix_caching", "num_kv_blocks", "block_size"),
    "hardware": ("device", "cpu_count", "gpu"),
}




class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class TraceEntry:
    kind: str  # "record" | "event" | "gap"
    data: dict

    @property
    def time(self) -> float:
        """When the live viewers got it: a record when its step ended, an event when emitted
        (a gap: when the write failed)."""
        return self.data["t_end"] if self.kind == "record" else self.data["time"]


@dataclass
class Trace:
    header: dict
    entries: list[TraceEntry] = field(default_factory=list)

    @property
    def records(self) -> list[dict]:
        return [e.data for e in self.entries if e.kind == "record"]

    @property
    def events(self) -> list[dict]:
        return [e.data for e in self.entries if e.kind == "event"]

    @property
    def gaps(self) -> list[dict]:
        return [e.data for e in self.entries if e.kind == "gap"]

    @property
    def lost_steps(self) -> list[int]:
        """The steps whose records the recording lost (as far as their gap lines know)."""
        return [g["step"] for g in self.gaps if g["lost"] == "record" and g["step"] is not None]


def trace_phases(trace: Trace) -> list[str]:
    """The engine phases the trace's records time, in their order (``total`` aside)."""
    records = trace.records
    return [p for p in (records[0]["durations_ms"] if records else ()) if p != "total"]


# ---- writing ---------------------------------------------------------------------------------
def make_header(info: SourceInfo, text: str = "full") -> dict:
    """The header line for a run of a record source (``info().trace_header``: model config,
    engine config and hardware)."""
    if text not in TEXT_MODES:
        raise ValueError(f"text must be one of {TEXT_MODES}, got {text!r}")
    return {"type": "header", "format": FORMAT, "version": FORMAT_VERSION,
            "schema_version": schema.SCHEMA_VERSION, "started_at": time.time(), "text": text,
            **info.trace_header}


def redact_record(data: dict, readable: Callable[[str], bool]) -> dict:
    sampled = data["sampled"]
    if all(readable(rid) for rid in sampled):
        return data
    return {**data, "sampled": {rid: tok if readable(rid) else HIDDEN_TOKEN
                                for rid, tok in sampled.items()}}


def redact_event(data: dict) -> dict:
    hidden = [HIDDEN_TOKEN] * len(data["token_ids"])
    return {**data, "prompt": None, "text": "", "token_ids": hidden}


@dataclass(frozen=True, slots=True)
class TraceLimits:
    """Where a recording stops by itself (the dashboard's Record toggle; ``--record`` has
    none): so many records (steps), or so many bytes of JSON written before compression."""

    max_records: int | None = None
    max_bytes: int | None = None

    def reached(self, records: int, size: int) -> bool:
        return (self.max_records is not None and records >= self.max_records) or \
            (self.max_bytes is not None and size >= self.max_bytes)


class TraceWriter:
    """Appends a run to a trace file from a background thread.

    ``add_record``/``add_event`` (or ``attach(async_llm)``) only enqueue, so they are safe to
    call on the engine thread; serialization, redaction and disk writes happen on the writer
    thread. ``readable(request_id)`` decides whose text is kept (required when the header's
    text is "own"; by default all for "full", none for "redacted"); ``label_of(request_id)``
    gives an arrival's dashboard label. The writer thread ends the file (the end line) when
    ``close()`` is called or when ``limits`` are reached (``capped``; it then detaches itself
    and ignores what comes after).

    ``header`` may be a callable, asked on the writer thread just before the first entry (or the
    end line) is written: a recording attached to a source that is not ready yet (an engine
    still loading, or a vLLM that has not connected) misses none of its first steps, and its
    header describes the engine those steps came from.
    """

    def __init__(self, path: str | os.PathLike, header: dict | Callable[[], dict],
                 readable: Callable[[str], bool] | None = None,
                 label_of: Callable[[str], str | None] | None = None,
                 limits: TraceLimits = TraceLimits()):
        if not callable(header) and header.get("text") == "own" and readable is None:
            raise ValueError("TraceWriter: a trace of text 'own' needs readable(request_id)")
        self.path = Path(path)
        self.header: dict | None = None  # as written (a callable header: once it is asked)
        self._header = header
        self.limits = limits
        self.num_records = self.num_events = self.num_gaps = self.num_bytes = 0
        self.capped = False
        self._readable = readable or (lambda _rid: self.header["text"] == "full")
        self._label_of = label_of
        self._queue: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._unsubscribe: list[Callable[[], None]] = []
        self._closed = False
        self._last_step: int | None = None  # of the last record written (writer thread)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = _open_write(self.path)
        if not callable(header):
            self._write_header()
        self._thread = threading.Thread(target=self._drain, name="batchscope-trace", daemon=True)
        self._thread.start()

    def attach(self, llm) -> TraceWriter:
        """Record every step and request event of a running ``AsyncLLM``."""
        self._unsubscribe += [llm.subscribe(self.add_record), llm.subscribe_events(self.add_event)]
        return self

    def add_record(self, record) -> None:
        self.add("record", record)

    def add_event(self, event) -> None:
        self.add("event", event)

    def add(self, kind: str, data) -> None:
        """An entry of ``kind`` "record", "event" or "gap" (a gap line's content)."""
        if not self._closed:
            self._queue.put((kind, data))

    @property
    def running(self) -> bool:
        return not self._closed

    def close(self) -> None:
        """Write what is queued and the end line (idempotent; waits for the writer thread)."""
        self._detach()
        self._queue.put(None)
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _detach(self) -> None:
        self._closed = True
        unsubscribe, self._unsubscribe = self._unsubscribe, []
        for remove in unsubscribe:
            remove()

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            self._write_header()
            self._write_entry(*item)
            if self.limits.reached(self.num_records, self.num_bytes):
                self.capped = True
                self._detach()
                break
        self._write_header()
        self._write_line({"type": "end", "records": self.num_records, "events": self.num_events,
                          "gaps": self.num_gaps})
        self._file.close()

    def _write_header(self) -> None:
        if self.header is None:
            self.header = self._header() if callable(self._header) else self._header
            self._write_line(self.header)

    def _write_entry(self, kind: str, obj) -> None:
        if kind == "gap":
            self._write_gap(obj)
            if obj.get("lost") == "record":
                self._last_step = None  # the gap line accounts for the skip
            return
        try:
            data = obj if isinstance(obj, dict) else obj.to_dict()
            if kind == "record":
                self._note_skipped(data["step"])
            data = redact_record(data, self._readable) if kind == "record" else self._event(data)
            self._write_line({"type": kind, "data": data})
        except Exception as exc:  # keep recording; the file says what is missing
            log.exception("trace %s: could not write a %s", self.path, kind)
            self._write_gap(_gap(kind, obj, exc))
            return
        if kind == "record":
            self.num_records += 1
        else:
            self.num_events += 1

    def _note_skipped(self, step: int) -> None:
        """A gap line for steps that never reached the recorder (an engine in another process
        drops records when its reader is slow: its steps jump)."""
        last, self._last_step = self._last_step, step
        if last is not None and step > last + 1:
            self._write_gap({"lost": "record", "step": last + 1, "time": time.time(),
                             "error": f"{step - last - 1} steps ({last + 1}-{step - 1}) never reached "
                                      "the recorder"})

    def _write_gap(self, gap: dict) -> None:
        self._write_line({"type": "gap", **gap})
        self.num_gaps += 1

    def _event(self, event: dict) -> dict:
        """The event with its dashboard label, or without any text if it may not be kept."""
        rid = event["request_id"]
        if not self._readable(rid):
            return redact_event(event)
        label = self._label_of(rid) if self._label_of and event["kind"] == "arrival" else None
        return {**event, "label": label} if label else event

    def _write_line(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"  # whole, or not at all
        self._file.write(line)
        self.num_bytes += len(line)


def _gap(kind: str, obj, exc: Exception) -> dict:
    """The gap line's content for ``obj``, a ``kind`` entry that could not be written."""
    step = obj.get("step") if isinstance(obj, dict) else getattr(obj, "step", None)
    return {"lost": kind, "step": step if isinstance(step, int) else None, "time": time.time(),
            "error": f"{type(exc).__name__}: {exc}"}


def _open_write(path: Path) -> IO[str]:
    if path.name.endswith(".gz"):
        return gzip.open(path, "wt", encoding="utf-8")
    return path.open("w", encoding="utf-8")


def write_trace(path: str | os.PathLike, trace: Trace) -> None:
    """Write a whole trace at once (tests, re-encoding a file); its text is kept as it is."""
    with TraceWriter(path, trace.header, readable=lambda _rid: True) as writer:
        for entry in trace.entries:
            writer.add(entry.kind, entry.data)


# ---- reading ---------------------------------------------------------------------------------
def load_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a whole trace file (plain or gzip, whatever its name)."""
    path = Path(path)
    where = str(path)
    try:
        with path.open("rb") as probe:
            gzipped = probe.read(2) == GZIP_MAGIC
    except OSError as exc:
        raise TraceError(f"{where}: cannot open trace file ({exc.strerror})") from None
    opener = gzip.open if gzipped else open
    with opener(path, "rt", encoding="utf-8") as stream:
        reader = _TraceReader(where)
        for lineno, line in _numbered_lines(stream, where):
            reader.read(_parse_line(line, f"{where}: line {lineno}"), lineno)
    return reader.finish()


class _TraceReader:
    """Checks each line against the ones before it and collects the trace."""

    def __init__(self, where: str):
        self.where = where
        self.trace: Trace | None = None
        self.end: dict | None = None
        self.last_step: int | None = None
        self.after_gap = False  # a lost record: the next step may skip
        self.lineno = 0

    def read(self, obj: dict, lineno: int) -> None:
        at, self.lineno = f"{self.where}: line {lineno}", lineno
        kind = obj.get("type")
        if self.end is not None:
            raise TraceError(f"{at}: content after the end line")
        if self.trace is None:
            self.trace = Trace(_check_header(obj, at))
        elif kind == "record":
            self.last_step = _check_record(obj.get("data"), self.last_step, self.after_gap, at)
            self.after_gap = False
            self.trace.entries.append(TraceEntry("record", obj["data"]))
        elif kind == "event":
            _check_event(obj.get("data"), at)
            self.trace.entries.append(TraceEntry("event", obj["data"]))
        elif kind == "gap":
            gap = _check_gap(obj, at)
            self.after_gap = self.after_gap or gap["lost"] == "record"
            self.trace.entries.append(TraceEntry("gap", gap))
        elif kind == "end":
            self.end = obj
        else:
            raise TraceError(f"{at}: unknown entry type {kind!r} "
                             "(expected 'record', 'event', 'gap' or 'end')")

    def finish(self) -> Trace:
        if self.trace is None:
            raise TraceError(f"{self.where}: line 1: the file is empty (expected a trace header)")
        if self.end is None:
            raise TraceError(f"{self.where}: truncated: the file stops after line {self.lineno} "
                             "without the end line (the recording was cut off or the file was "
                             "cut short)")
        _check_counts(self.trace, self.end, f"{self.where}: line {self.lineno}")
        return self.trace


def _numbered_lines(stream: IO[str], where: str) -> Iterator[tuple[int, str]]:
    lineno = 0
    try:
        for lineno, line in enumerate(stream, start=1):
            if not line.endswith("\n"):
                raise TraceError(f"{where}: line {lineno}: truncated: the last line is incomplete")
            yield lineno, line
    except EOFError:
        raise TraceError(f"{where}: line {lineno + 1}: truncated: the gzip stream ends early "
                         f"(the file is cut short after line {lineno})") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{where}: line {lineno + 1}: corrupt gzip data ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(f"{where}: line {lineno + 1}: not UTF-8 text") from None


def _parse_line(line: str, at: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{at}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{at}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _check_header(obj: dict, at: str) -> dict:
    if obj.get("type") != "header" or obj.get("format") != FORMAT:
        raise TraceError(f"{at}: not a Batchscope trace (the first line must be a header with "
                         f"format {FORMAT!r})")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceError(f"{at}: header version {version!r} is not an integer")
    if version > FORMAT_VERSION:
        raise TraceError(f"{at}: trace format version {version} is newer than this Batchscope "
                         f"reads ({FORMAT_VERSION}); upgrade Batchscope to replay it")
    if version < FORMAT_VERSION:
        raise TraceError(f"{at}: trace format version {version} is no longer supported "
                         f"(this Batchscope reads version {FORMAT_VERSION}); record it again")
    if obj.get("schema_version") not in schema.SCHEMA_VERSIONS:
        raise TraceError(f"{at}: telemetry schema_version {obj.get('schema_version')!r} is not "
                         f"one of {schema.SCHEMA_VERSIONS}")
    missing = [k for k in ("started_at", "text", "model", "engine", "hardware") if k not in obj]
    if missing:
        raise TraceError(f"{at}: header is missing {missing}")
    if obj["text"] not in TEXT_MODES:
        raise TraceError(f"{at}: header text {obj['text']!r} not in {TEXT_MODES}")
    for name, keys in HEADER_KEYS.items():
        part = obj[name]
        lacking = [k for k in keys if k not in part] if isinstance(part, dict) else keys
        if lacking:
            raise TraceError(f"{at}: header {name} is missing {lacking}")
    return obj


def _check_record(data: Any, last_step: int | None, after_gap: bool, at: str) -> int:
    try:
        schema.validate_record(data)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise TraceError(f"{at}: invalid iteration record: {exc}") from None
    step = data["step"]
    if last_step is not None and not (step > last_step if after_gap else step == last_step + 1):
        raise TraceError(f"{at}: record step {step} follows step {last_step} "
                         "(a record is missing, repeated or out of order)")
    return step


_EVENT_FIELDS = {f.name for f in dataclasses.fields(schema.RequestEvent)}


def _check_event(data: Any, at: str) -> None:
    if not isinstance(data, dict):
        raise TraceError(f"{at}: invalid request event: expected a JSON object")
    missing = sorted(_EVENT_FIELDS - set(data))
    if missing:
        raise TraceError(f"{at}: invalid request event: missing field(s) {missing}")
    if data["kind"] not in EVENT_KINDS:
        raise TraceError(f"{at}: invalid request event: kind {data['kind']!r} not in {EVENT_KINDS}")


def _check_gap(obj: dict, at: str) -> dict:
    gap = {k: v for k, v in obj.items() if k != "type"}
    if gap.get("lost") not in ("record", "event") or "time" not in gap:
        raise TraceError(f"{at}: invalid gap: needs lost ('record' or 'event') and time")
    if gap.get("step") is not None and not isinstance(gap["step"], int):
        raise TraceError(f"{at}: invalid gap: step {gap['step']!r} is not an integer")
    return {"step": None, "error": "", **gap}


def _check_counts(trace: Trace, end: dict, at: str) -> None:
    counts = {"records": len(trace.records), "events": len(trace.events)}
    if "gaps" in end:  # files written before gap lines existed have no count
        counts["gaps"] = len(trace.gaps)
    for name, actual in counts.items():
        if end.get(name) != actual:
            raise TraceError(f"{at}: the end line says {end.get(name)!r} {name} but the file "
                             f"holds {actual} (lines were removed or added)")
