"""Recorder: trace files of a live engine, for the command line and the Record toggle.

``record_run(path)`` (``app.py --record PATH``) records the whole run with every request's
text: the operator owns the machine. ``start(owner)``/``stop(owner)`` (the dashboard's Record
toggle) record one visitor's file with only the text that visitor may read (privacy.py), and
the dashboard labels of those requests, in a temporary folder the download button serves.
"""
from __future__ import annotations

import secrets
import tempfile
import threading
import time
from pathlib import Path

from .hub import TelemetryHub
from .privacy import Audience
from .trace import TraceWriter, make_header

RUN = object()  # the key of the --record recording, which belongs to no visitor


class Recorder:
    def __init__(self, llm, hub: TelemetryHub, directory: str | Path | None = None):
        self.llm = llm
        self.hub = hub
        self.directory = Path(directory or tempfile.mkdtemp(prefix="batchscope-traces-"))
        self._writers: dict[object, TraceWriter] = {}
        self._lock = threading.Lock()

    def record_run(self, path: str | Path) -> threading.Thread:
        """Record everything from the moment the model is loaded; returns the thread that
        waits for it (the model loads in the background)."""
        def attach() -> None:
            try:
                self.llm.wait_ready()
            except RuntimeError:
                return  # the model failed to load: the page says so, nothing to record
            self._begin(RUN, Path(path), "full", None)

        thread = threading.Thread(target=attach, name="batchscope-record", daemon=True)
        thread.start()
        return thread

    def start(self, owner: str | None) -> Path:
        """Start (or restart) a visitor's recording; raises RuntimeError while loading."""
        if self.llm.engine is None:
            raise RuntimeError("the model is not loaded yet")
        audience = Audience(owner, self.hub.shared_view)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.directory / f"batchscope-{stamp}-{secrets.token_hex(3)}.jsonl.gz"
        if audience.shared:
            return self._begin(owner, path, "full", None)
        return self._begin(owner, path, "own",
                           lambda rid: audience.can_read(self.hub.claimed(rid)[0]))

    def stop(self, owner: object) -> Path | None:
        """End a recording; returns its file, or None if none was running."""
        with self._lock:
            writer = self._writers.pop(owner, None)
        if writer is None:
            return None
        writer.close()
        return writer.path

    def close(self) -> None:
        with self._lock:
            owners = list(self._writers)
        for owner in owners:
            self.stop(owner)

    def _begin(self, owner: object, path: Path, text: str, readable) -> Path:
        writer = TraceWriter(path, make_header(self.llm.engine, text), readable,
                             label_of=lambda rid: self.hub.claimed(rid)[1])
        writer.attach(self.llm)
        with self._lock:
            previous = self._writers.pop(owner, None)
            self._writers[owner] = writer
        if previous is not None:
            previous.close()
        return path
