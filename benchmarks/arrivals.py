"""The arrival rule every peer applies the same way (see ``RequestSpec.after_tokens``)."""
from __future__ import annotations

from .workloads import Workload


class ArrivalGate:
    """Releases a workload's requests in order: the next one is due once every request
    released before it has produced ``after_tokens`` tokens (or all of its tokens)."""

    def __init__(self, workload: Workload):
        self.specs = workload.requests
        self.released = 0

    @property
    def done(self) -> bool:
        return self.released == len(self.specs)

    def due(self, produced: list[int]) -> list[int]:
        """Indices of the requests to submit now, given tokens produced so far per request."""
        out = []
        while not self.done:
            need = self.specs[self.released].after_tokens
            if any(produced[i] < min(need, self.specs[i].max_tokens) for i in range(self.released)):
                break
            out.append(self.released)
            self.released += 1
        return out
