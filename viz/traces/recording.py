"""Recorder: trace files of a live record source (Batchscope's engine, or vLLM through the
ingest), for the command line and the Record toggle.

``record_run(path)`` (``app.py --record PATH``) records the whole run with every request's
text: the operator owns the machine, and the file is theirs to keep. ``start(tab, owner)``
/ ``stop(tab)`` (the dashboard's Record toggle) record one browser tab's file with only the
text its visitor may read (viz/live/privacy.py) and the dashboard labels of those requests, in a
temporary folder the download button serves. A tab's recording is capped (``TAB_LIMITS``:
it stops by itself, complete), ends when the tab closes (``discard``: its files are deleted,
nobody can download them any more), and ``close()`` at shutdown deletes the whole folder.
"""
from __future__ import annotations

import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path

from ..live.hub import TelemetryHub
from ..live.privacy import Audience
from .trace import TraceLimits, TraceWriter, make_header

RUN = object()  # the key of the --record recording, which belongs to no visitor
TAB_LIMITS = TraceLimits(max_records=20_000, max_bytes=256 * 2**20)  # ~10 min of busy steps


class Recorder:
    def __init__(self, llm, hub: TelemetryHub, directory: str | Path | None = None,
                 limits: TraceLimits = TAB_LIMITS):
        """``llm``: the record source (an AsyncLLM, or an IngestSource): its ``status()``,
        ``info()``, ``subscribe`` and ``subscribe_events``."""
        self.llm = llm
        self.hub = hub
        self.limits = limits
        self._own_directory = directory is None  # a temporary folder: deleted by close()
        self.directory = Path(directory or tempfile.mkdtemp(prefix="batchscope-traces-"))
        self._writers: dict[object, TraceWriter] = {}
        self._files: dict[object, list[Path]] = {}  # every file each tab recorded
        self._lock = threading.Lock()

    def record_run(self, path: str | Path) -> None:
        """Record everything from now on, with every request's text. The source may still be
        loading (or waiting for vLLM to connect): the header is written with its first step."""
        self._begin(RUN, Path(path), "full", None, TraceLimits())

    def start(self, tab: object, owner: str | None) -> Path:
        """Start (or restart) a tab's recording; raises RuntimeError while loading."""
        state = self.llm.status()["state"]
        if state != "ready":
            raise RuntimeError(f"the model is not loaded: the engine is {state}")
        audience = Audience(owner, self.hub.shared_view)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.directory / f"batchscope-{stamp}-{secrets.token_hex(3)}.jsonl.gz"
        with self._lock:
            self._files.setdefault(tab, []).append(path)
        if audience.shared:
            return self._begin(tab, path, "full", None, self.limits)
        return self._begin(tab, path, "own",
                           lambda rid: audience.can_read(self.hub.claimed(rid)[0]), self.limits)

    @property
    def recording(self) -> list[object]:
        """The keys of the recordings still writing (a capped one has stopped by itself)."""
        with self._lock:
            return [key for key, writer in self._writers.items() if writer.running]

    def stop(self, tab: object) -> Path | None:
        """End a recording; returns its file, or None if none was running."""
        with self._lock:
            writer = self._writers.pop(tab, None)
        if writer is None:
            return None
        writer.close()
        return writer.path

    def discard(self, tab: object) -> None:
        """The tab is gone: end its recording and delete every file it recorded."""
        self.stop(tab)
        with self._lock:
            files = self._files.pop(tab, [])
        for path in files:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        """Shutdown: end every recording; delete the temporary folder."""
        with self._lock:
            keys = list(self._writers)
        for key in keys:
            self.stop(key)
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _begin(self, key: object, path: Path, text: str, readable,
               limits: TraceLimits) -> Path:
        writer = TraceWriter(path, lambda: make_header(self.llm.info(), text), readable,
                             label_of=lambda rid: self.hub.claimed(rid)[1], limits=limits)
        writer.attach(self.llm)
        with self._lock:
            previous = self._writers.pop(key, None)
            self._writers[key] = writer
        if previous is not None:
            previous.close()
        return path
