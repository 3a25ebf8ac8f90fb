"""Peak memory of one measured run: CUDA's allocator peak, or on CPU the process RSS
sampled by a background thread (weights, KV pool, activations and Python together)."""
from __future__ import annotations

import threading

import psutil
import torch


class PeakMemory:
    def __init__(self, device: torch.device, interval_s: float = 0.005):
        self.device = device
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            process = psutil.Process()
            self.peak_bytes = process.memory_info().rss
            self._thread = threading.Thread(target=self._sample, args=(process,), daemon=True)
            self._thread.start()
        return self

    def _sample(self, process: psutil.Process) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, process.memory_info().rss)

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device)
        else:
            self._stop.set()
            self._thread.join()

    @property
    def peak_mb(self) -> float:
        return round(self.peak_bytes / 2**20, 1)
