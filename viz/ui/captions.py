"""The four live views: element id, and title and caption in English and Chinese (from the
strings table, keys ``view_<name>`` and ``view_<name>_caption``)."""
from __future__ import annotations

from dataclasses import dataclass

from .strings import PAGE

ELEMENT_IDS = ("bs-token-layout", "bs-block-tables", "bs-attention", "bs-timing")


@dataclass(frozen=True, slots=True)
class View:
    elem_id: str
    title: str
    title_zh: str
    caption: str
    caption_zh: str

    @classmethod
    def named(cls, elem_id: str) -> View:
        key = "view_" + elem_id.removeprefix("bs-").replace("-", "_")
        return cls(elem_id, PAGE.en(key), PAGE.zh(key), PAGE.en(f"{key}_caption"),
                   PAGE.zh(f"{key}_caption"))


VIEWS = tuple(View.named(elem_id) for elem_id in ELEMENT_IDS)
