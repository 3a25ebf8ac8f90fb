"""JSON text of the dashboard's messages (the protocol is documented in hub.py).

Serialising is the hub's main cost: every record goes to every viewer. So a record's bulk (all
but ``sampled``, its only per-viewer part) is serialised once per tick as a ``RecordBody`` and
completed per audience, and a message whose ``records`` are already JSON text is assembled
from its members' texts. Objects are always built member by member, never by cutting a
serialised object open, so empty objects and any key order are safe.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, is_dataclass


def dumps(value) -> str:
    """JSON text of ``value``; dataclasses (a live record's nested parts) become objects."""
    return json.dumps(value, default=_plain)


def _plain(obj) -> dict:
    if is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in fields(obj)}
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def json_object(members: dict, **raw_json: str) -> str:
    """The JSON object of ``members`` plus members whose values are already JSON text."""
    parts = [f"{json.dumps(key)}: {dumps(value)}" for key, value in members.items()]
    parts += [f"{json.dumps(key)}: {text}" for key, text in raw_json.items()]
    return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True, slots=True)
class RecordBody:
    """One record serialised without ``sampled``: its members' JSON text."""

    members: str

    @classmethod
    def of(cls, record: dict) -> RecordBody:
        return cls(", ".join(f"{json.dumps(key)}: {dumps(value)}"
                             for key, value in record.items() if key != "sampled"))

    def with_sampled(self, sampled: dict) -> str:
        joint = ", " if self.members else ""
        return "{" + self.members + joint + '"sampled": ' + dumps(sampled) + "}"


def json_array(texts: list[str]) -> str:
    return "[" + ", ".join(texts) + "]"
