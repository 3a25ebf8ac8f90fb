"""Who may use the presenter controls: pause, step, slow motion, policy and token budget.

They act on the one shared engine, so on a public server they change every visitor's view
and every API client's latency. Locally they are open; ``--presenter-key`` limits them to
visitors who type the key; on a Space without a key they are hidden.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PresenterAccess:
    key: str | None = None  # when set, a control acts only when this key was entered
    hidden: bool = False  # no presenter controls at all

    @classmethod
    def for_server(cls, key: str | None, on_space: bool) -> PresenterAccess:
        return cls(key or None, hidden=on_space and not key)

    def allows(self, entered: str | None) -> bool:
        if self.hidden:
            return False
        return self.key is None or hmac.compare_digest((entered or "").encode(), self.key.encode())
