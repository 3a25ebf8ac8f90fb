"""JSON text of the dashboard's messages (the protocol is documented in hub.py).

Serialising is the hub's main cost: every record goes to every viewer. So a record's bulk (all
but ``sampled``, its only per-viewer part) is serialised once per tick as a ``RecordBody`` and
completed per audience, and a message whose ``records`` are already JSON text is assembled
from its members' texts. Objects are always built member by member, never by cutting a
serialised object open, so empty objects and any key order are safe.

Compressing is the other per-viewer cost: websockets' permessage-deflate compresses every
message once per connection (its context is the connection's), which took 61% of the server's
event loop with 300 viewers. So a browser asks for ``?compress=deflate-raw`` and gets each
``Message`` as raw DEFLATE (RFC 1951) bytes, compressed once for every viewer it goes to, and
inflates it with the browser's DecompressionStream; the server offers no permessage-deflate.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field, fields, is_dataclass

import orjson

DEFLATE_RAW = "deflate-raw"  # the ``compress`` a websocket may ask for
DEFLATE_LEVEL = 6  # zlib's default: a message is compressed once, however many viewers get it


def dumps(value) -> str:
    """JSON text of ``value``; dataclasses (a live record's nested parts) become objects.

    orjson, as the hub serialises every record whether or not anyone watches: a served engine's
    record (~33 KB of text, most of it the KV pool's blocks) took 0.35 ms with the standard
    library's encoder and 0.06 with orjson, and the hub's ticks were half of the API server's
    event loop under vLLM's benchmark client (BENCHMARKS.md, "The hub's records"). Text orjson
    refuses (a lone surrogate, which a page's JSON may send in a label) goes through the standard
    library, which escapes it; NaN is null with orjson (the standard library's NaN is not JSON)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()  # (dataclasses natively)
    except TypeError:  # (orjson.JSONEncodeError; the standard library names what it cannot hold)
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


def deflate_raw(text: str, final: bool = True) -> bytes:
    """``text`` as raw DEFLATE. Not ``final``: flushed to a byte boundary without the last block,
    so that another raw DEFLATE stream may follow and the two inflate as one text."""
    compressor = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(text.encode()) + compressor.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)


@dataclass(eq=False, slots=True)
class Message:
    """One message's JSON text, shared by every viewer it goes to, compressed at most once.

    A message may end in a ``tail`` shared with other messages (a snapshot's requests and
    history, the same for every stranger who joins between two ticks): its text is ``own`` then
    the tail's, and its compressed bytes are ``own``'s, flushed, then the tail's, compressed once.
    """

    own: str
    tail: Message | None = None
    _deflated: bytes | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return self.own if self.tail is None else self.own + self.tail.text

    @property
    def deflated(self) -> bytes:
        """The text as raw DEFLATE (no zlib header), what DecompressionStream("deflate-raw") reads."""
        if self._deflated is None:
            own = deflate_raw(self.own, final=self.tail is None)
            self._deflated = own if self.tail is None else own + self.tail.deflated
        return self._deflated
