"""The runner's side of a resident peer: ``open_session`` starts ``benchmarks.worker --serve``
under the peer's interpreter (or, for quick checks, a ``PeerSession`` in this process) and hands
back something with ``info``, ``repeat(r)`` and ``close()``.

Commands go to the worker's stdin, answers come back on a pipe of their own: vLLM and
llama.cpp print to stdout, which goes to a log kept for the error message if the worker fails.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
from pathlib import Path

from .worker import PeerSession

ROOT = Path(__file__).resolve().parent.parent


def worker_env() -> dict[str, str]:
    """A worker's environment: this checkout importable under any interpreter."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                TOKENIZERS_PARALLELISM="false")


class RemoteSession:
    """A ``PeerSession`` in a process of its own."""

    def __init__(self, job: dict, python: str, timeout_s: float):
        self.timeout_s = timeout_s
        self.log = tempfile.TemporaryFile(mode="w+")
        read, write = os.pipe()
        self.proc = subprocess.Popen([python, "-m", "benchmarks.worker", "--serve", str(write)], cwd=ROOT, env=worker_env(),
                                     stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     pass_fds=(write,))
        os.close(write)
        self.answers = os.fdopen(read)
        try:
            self.info: dict = self._ask({"setup": job})["info"]
        except RuntimeError:
            self._end()
            raise

    def repeat(self, r: int) -> dict:
        return self._ask({"repeat": r})

    def close(self) -> None:
        try:
            self._ask({"close": True}, timeout_s=min(self.timeout_s, 60.0))
        finally:
            self._end()

    def _ask(self, command: dict, timeout_s: float | None = None) -> dict:
        """Send one command; its answer, or RuntimeError with the worker's traceback or log."""
        timeout_s = timeout_s or self.timeout_s
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"the worker has ended (exit {self.proc.poll()}):\n{self._log_tail()}") from None
        ready, _, _ = select.select([self.answers], [], [], timeout_s)
        line = self.answers.readline() if ready else ""
        if not line:
            reason = f"no answer in {timeout_s:.0f} s" if not ready else f"the worker ended (exit {self.proc.poll()})"
            raise RuntimeError(f"{reason} to {list(command)[0]}:\n{self._log_tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{answer['error']}\n{self._log_tail()}")
        return answer

    def _log_tail(self, chars: int = 4000) -> str:
        self.log.seek(0)
        return self.log.read()[-chars:]

    def _end(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.answers.close()
        self.log.close()


def open_session(job: dict, timeout_s: float, in_process: bool, python: str):
    """A loaded and warmed-up peer, in its own process unless ``in_process``."""
    if in_process:
        return PeerSession(json.loads(json.dumps(job)))
    return RemoteSession(job, python, timeout_s)
