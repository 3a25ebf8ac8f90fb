"""PhaseTimer: per-phase durations of one step, without adding synchronisation.

On CPU each phase is timed with ``perf_counter``. On CUDA a phase records a pair of events;
they are read in ``durations_ms``, normally after the step's sampler has already synchronised
(it copies the sampled tokens to the host), so timing costs no extra stall. Only a step of
prefill chunks alone samples nothing; reading its events then waits for its forward pass.
A phase timed both ways (host packing, then device work, both "prepare") adds the two.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import torch


class PhaseTimer:
    def __init__(self, cuda: bool):
        self.cuda = cuda
        self._cpu: dict[str, float] = {}
        self._events: dict[str, tuple] = {}

    @contextmanager
    def phase(self, name: str, device_work: bool = False):
        if self.cuda and device_work:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events[name] = (start, end)
        else:
            t = time.perf_counter()
            yield
            self._cpu[name] = self._cpu.get(name, 0.0) + (time.perf_counter() - t) * 1e3

    def durations_ms(self, phases: tuple[str, ...]) -> dict[str, float]:
        out = {name: round(self._cpu.get(name, 0.0), 4) for name in phases}
        for name, (start, end) in self._events.items():
            end.synchronize()  # normally already reached (see the module note)
            out[name] = round(self._cpu.get(name, 0.0) + start.elapsed_time(end), 4)
        return out
