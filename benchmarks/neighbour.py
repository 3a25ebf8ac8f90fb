"""A busy neighbour for a benchmark: a process that burns a CPU for ``busy_ms`` of every
``period_ms`` while the measurement runs (``python -m benchmarks.lockstep --neighbour 0.5,2.5``).

Why: a served engine shares this machine's 2 vCPUs with its API server's event loop and the
benchmark client, which wake for a moment many times a second and deschedule one of the engine's
OpenMP threads; the other then waits at the kernel's barrier. A measurement alone on the machine
never shows what a kernel's work split costs there; beside this neighbour it does.
"""
from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Neighbour:
    busy_ms: float
    period_ms: float

    @classmethod
    def parse(cls, text: str) -> Neighbour:
        """``"BUSY,PERIOD"`` in milliseconds, 0 < BUSY < PERIOD (e.g. ``0.5,2.5``: a fifth of a CPU)."""
        try:
            busy, period = (float(part) for part in text.split(","))
        except ValueError:
            raise ValueError(f"--neighbour takes BUSY_MS,PERIOD_MS (e.g. 0.5,2.5), got {text!r}") from None
        if not 0 < busy < period:
            raise ValueError(f"--neighbour {text!r}: the busy time must be above 0 and below the period")
        return cls(busy, period)


def argument(text: str) -> Neighbour:
    """Neighbour.parse for argparse, whose message for a ValueError would drop ours."""
    try:
        return Neighbour.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def burn(neighbour: Neighbour) -> None:
    """Busy for busy_ms, asleep for the rest of each period, until killed."""
    while True:
        start = time.perf_counter()
        while time.perf_counter() - start < neighbour.busy_ms / 1e3:
            pass
        time.sleep((neighbour.period_ms - neighbour.busy_ms) / 1e3)


@contextlib.contextmanager
def running(neighbour: Neighbour | None) -> Iterator[subprocess.Popen | None]:
    """The neighbour's process for the duration of the block (none when ``neighbour`` is None)."""
    if neighbour is None:
        yield None
        return
    spec = f"{neighbour.busy_ms},{neighbour.period_ms}"
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.neighbour", spec])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    burn(Neighbour.parse(sys.argv[1]))
