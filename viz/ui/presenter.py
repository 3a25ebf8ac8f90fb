"""Who may use the presenter controls: pause, step, slow motion, policy, token budget and
the Record toggle.

They act on the one shared engine (or, for Record, on the server's disk), so on a public
server they change every visitor's view and every API client's latency. Locally they are
open; ``--presenter-key`` limits them to visitors who type the key; on a Space without a
key they are hidden.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass

ALLOWED, HIDDEN, MISSING, WRONG = "allowed", "hidden", "missing", "wrong"


@dataclass(frozen=True, slots=True)
class PresenterAccess:
    key: str | None = None  # when set, a control acts only when this key was entered
    hidden: bool = False  # no presenter controls at all

    @classmethod
    def for_server(cls, key: str | None, on_space: bool) -> PresenterAccess:
        return cls(key or None, hidden=on_space and not key)

    def verdict(self, entered: str | None) -> str:
        """``ALLOWED``, or why not: ``HIDDEN``, ``MISSING`` (no key typed) or ``WRONG``."""
        if self.hidden:
            return HIDDEN
        if self.key is None:
            return ALLOWED
        if not entered:
            return MISSING
        return ALLOWED if hmac.compare_digest(entered.encode(), self.key.encode()) else WRONG

    def allows(self, entered: str | None) -> bool:
        return self.verdict(entered) == ALLOWED
