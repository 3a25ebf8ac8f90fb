"""Peak memory of one measured run: CUDA's allocator peak, or on CPU the process's peak RSS
(weights, KV pool, activations and Python together).

On Linux the kernel keeps the peak RSS itself (``VmHWM``, reset through ``clear_refs``), which
costs nothing during the run. A peer that runs in child processes (vLLM's engine core and
worker, llama-server) is counted with them: the sum of every process's own peak. Elsewhere a background thread samples RSS every 5 ms; on a 2-core
machine such a thread steals time from the compute threads, so it is the fallback only."""
from __future__ import annotations

import re
import threading
from pathlib import Path

import psutil
import torch

PROC = Path("/proc")


def _pids() -> list[str]:
    return ["self", *(str(c.pid) for c in psutil.Process().children(recursive=True))]


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counters; False where the kernel offers none."""
    try:
        for pid in _pids():
            (PROC / pid / "clear_refs").write_text("5")
        return _peak_rss() is not None
    except OSError:
        return False


def _peak_rss() -> int | None:
    total = None
    for pid in _pids():
        try:
            match = re.search(r"^VmHWM:\s+(\d+) kB", (PROC / pid / "status").read_text(), re.MULTILINE)
        except OSError:  # a child that ended meanwhile
            continue
        if match:
            total = (total or 0) + int(match.group(1)) * 1024
    return total


def oom_kills() -> int | None:
    """Processes the Linux OOM killer has ended since boot (``/proc/vmstat``); None where not told."""
    try:
        match = re.search(r"^oom_kill (\d+)$", (PROC / "vmstat").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


class PeakMemory:
    def __init__(self, device: torch.device, interval_s: float = 0.005):
        self.device = device
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.method = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.method = "torch.cuda.max_memory_allocated"
        elif _reset_peak_rss():
            self.method = "VmHWM"
        else:
            process = psutil.Process()
            self.peak_bytes = process.memory_info().rss
            self._thread = threading.Thread(target=self._sample, args=(process,), daemon=True)
            self._thread.start()
            self.method = f"RSS sampled every {self.interval_s * 1e3:g} ms"
        return self

    def _sample(self, process: psutil.Process) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, process.memory_info().rss)

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device)
        elif self._thread is None:
            self.peak_bytes = _peak_rss() or 0
        else:
            self._stop.set()
            self._thread.join()

    @property
    def peak_mb(self) -> float:
        return round(self.peak_bytes / 2**20, 1)
