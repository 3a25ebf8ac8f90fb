"""RequestAliases: one id per request on the dashboard, whichever engine runs it.

The dashboard names a request it fires ("A1") before any engine sees it: its card, its colour
and its owner hang on that id. vLLM names it again: its OpenAI server makes an external id from
the client's ``X-Request-Id`` ("chatcmpl-<id>", "cmpl-<id>-0"), and its input processor appends
8 random characters ("chatcmpl-<id>-1f2e3d4c") to get the engine-core id that the scheduler, and
so every record, uses. The remote submitter registers the external id it caused
(``add(external, "A1")``); ``rename`` gives each record the dashboard's ids for those requests,
so cards and segments share one id and one colour. Requests of other clients (curl, a load
test) keep vLLM's own ids. Renaming builds a new record dict and leaves the one it got alone.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

SUFFIX = 9  # "-" and the 8 random characters vLLM appends to an external request id
CAPACITY = 4096  # aliases kept, oldest forgotten first (a request is long finished by then)


class RequestAliases:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._names: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, external_id: str, request_id: str) -> None:
        """Records that name ``external_id`` (with or without vLLM's suffix) show ``request_id``."""
        with self._lock:
            self._names[external_id] = request_id
            while len(self._names) > self.capacity:
                self._names.popitem(last=False)

    def resolve(self, engine_id: str) -> str:
        """The dashboard's id of an engine-core request id (itself when it has none)."""
        names = self._names
        found = names.get(engine_id)
        if found is None and len(engine_id) > SUFFIX and engine_id[-SUFFIX] == "-":
            found = names.get(engine_id[:-SUFFIX])
        return engine_id if found is None else found

    def rename(self, record: dict) -> dict:
        """``record`` with every request id resolved (the same dict when none changes)."""
        if not self._names:
            return record
        ids = {s["request_id"] for s in record["segments"]} | set(record["requests"]) | \
            set(record["finished"]) | set(record["aborted"]) | set(record["preempted"]) | \
            set(record["kv"].get("owners") or ()) - {None}
        names = {rid: self.resolve(rid) for rid in ids}
        names = {rid: name for rid, name in names.items() if name != rid}
        return _renamed(record, names) if names else record


def _renamed(record: dict, names: dict[str, str]) -> dict:
    def one(rid):
        return names.get(rid, rid)

    def keys(mapping: dict) -> dict:
        return {one(rid): value for rid, value in mapping.items()}

    kv = record["kv"]
    owners = kv.get("owners")
    return {
        **record,
        "segments": [{**s, "request_id": one(s["request_id"])} for s in record["segments"]],
        "block_tables": keys(record["block_tables"]),
        "kv": {**kv, "owners": None if owners is None else [one(o) if o else o for o in owners]},
        "admitted": keys(record["admitted"]), "preempted": [one(r) for r in record["preempted"]],
        "finished": keys(record["finished"]), "aborted": [one(r) for r in record["aborted"]],
        "sampled": keys(record["sampled"]), "requests": keys(record["requests"]),
    }
