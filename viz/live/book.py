"""RequestBook: what every viewer needs to draw one text panel per request.

It folds the request events (fired from the dashboard, arrival, text deltas) into one entry
per request: prompt, text so far, timings for TTFT and inter-token latency, the owner (the
visitor who fired it) and a colour index shared by every view. A viewer that connects late,
or that lost frames, gets the entries as a snapshot; delta events carry the ``offset`` of
their text so that replaying a delta the snapshot already holds changes nothing. The offset
counts UTF-16 code units, the unit the page's JavaScript strings are sliced by: counted in
Python's code points, every delta after an emoji would land short of where it belongs.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass

from ..colors import PALETTE

NUM_COLORS = len(PALETTE)
CARDS_SHOWN = 40  # the cards a page shows (assets/js/cards.js MAX_CARDS)


def utf16_length(text: str) -> int:
    """The length of ``text`` as JavaScript counts it: a character past U+FFFF is two units."""
    return len(text.encode("utf-16-le")) // 2


@dataclass(slots=True)
class RequestEntry:
    request_id: str
    color: int
    owner: str | None = None
    label: str | None = None  # short text given by whoever fired it (e.g. the question)
    prompt: str | None = None
    num_prompt_tokens: int = 0
    text: str = ""
    num_output_tokens: int = 0
    arrival: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class RequestBook:
    """Not thread-safe: the hub calls it under its lock."""

    def __init__(self, capacity: int = 256, default_owner: str | None = None):
        self.capacity = capacity
        self.default_owner = default_owner  # the owner of requests nobody claimed
        self._entries: OrderedDict[str, RequestEntry] = OrderedDict()
        self._next_color = 0

    def claim(self, request_id: str, owner: str | None, label: str | None = None) -> None:
        entry = self._entry(request_id)
        entry.owner, entry.label = owner, label

    def owner(self, request_id: str) -> str | None:
        entry = self._entries.get(request_id)
        return entry.owner if entry else self.default_owner

    def label(self, request_id: str) -> str | None:
        entry = self._entries.get(request_id)
        return entry.label if entry else None

    def apply(self, event: dict) -> dict:
        """Fold one RequestEvent dict in; return it with ``color``, ``owner``, ``label`` and,
        for a delta, ``offset`` and ``token_offset``: where its text and tokens start in the
        request's output (so a viewer can apply a delta twice without harm)."""
        entry = self._entry(event["request_id"])
        entry.label = event.get("label") or entry.label  # a replayed arrival carries its label
        extra = {"color": entry.color, "owner": entry.owner, "label": entry.label}
        if event["kind"] == "arrival":
            entry.prompt = event.get("prompt")
            entry.num_prompt_tokens = event.get("num_prompt_tokens", 0)
            entry.arrival = event["time"]
        elif event["kind"] == "delta":
            extra["offset"], extra["token_offset"] = utf16_length(entry.text), entry.num_output_tokens
            entry.text += event.get("text", "")
            if event.get("token_ids"):
                entry.num_output_tokens += len(event["token_ids"])
                entry.first_token = entry.first_token or event["time"]
                entry.last_token = event["time"]
            if event.get("finished"):
                entry.finished = True
                entry.finish_reason = event.get("finish_reason")
                entry.error = event.get("error")
        return {**event, **extra}

    def entries(self) -> list[RequestEntry]:
        return list(self._entries.values())

    def oldest_arrival_on_screen(self) -> float | None:
        """The earliest arrival among the requests a page's cards show (cards.js cardOrder: the
        unfinished ones, then the latest finished, CARDS_SHOWN in all); None if none arrived."""
        entries = list(self._entries.values())
        shown = [e for e in entries if not e.finished] + [e for e in reversed(entries) if e.finished]
        arrivals = [e.arrival for e in shown[:CARDS_SHOWN] if e.arrival is not None]
        return min(arrivals, default=None)

    def clear(self) -> None:
        self._entries.clear()
        self._next_color = 0

    def _entry(self, request_id: str) -> RequestEntry:
        entry = self._entries.get(request_id)
        if entry is None:
            entry = RequestEntry(request_id, self._next_color % NUM_COLORS, self.default_owner)
            self._next_color += 1
            self._entries[request_id] = entry
            self._evict()
        return entry

    def _evict(self) -> None:
        """Forget the oldest finished requests beyond ``capacity`` (live ones stay)."""
        excess = len(self._entries) - self.capacity
        for rid in [rid for rid, e in self._entries.items() if e.finished][:max(excess, 0)]:
            del self._entries[rid]
