"""The HTML report's words in one language (``python -m viz.traces.export --lang``).

The report is a file someone hands on, so it is written in one language, English or Chinese,
never both: its own texts are the strings table's "report" section, and the names it shares with
the live views (kinds of rows, request states, engine phases, finish reasons) are the views'
own, so the report and the page call a thing by the same name.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..paths import ASSETS

LANGUAGES = ("en", "zh")
# The request timeline's states (viz/colors.py STATE_COLORS) -> the views' key naming each.
STATE_KEYS = {"idle": None, "waiting": "state.waiting", "prefill": "kind.prefill",
              "prefill chunk": "kind.prefill_chunk", "decode": "kind.decode", "preempted": "state.preempted"}


@dataclass(frozen=True, slots=True)
class ReportWords:
    lang: str
    report: dict[str, dict[str, str]]
    views: dict[str, dict[str, str]]

    def __call__(self, key: str, **fields) -> str:
        """The report's text ``key`` with ``{name}`` fields filled in."""
        return self.report[key][self.lang].format(**fields)

    def named(self, key: str, default: str) -> str:
        """The views' name ``key`` (a kind, state, phase or reason), or ``default`` if it has none."""
        entry = self.views.get(key)
        return entry[self.lang] if entry else default

    def state(self, name: str) -> str:
        """A state of the request timeline."""
        key = STATE_KEYS.get(name)
        return self.named(key, name) if key else self(name)


def report_words(lang: str = "en") -> ReportWords:
    if lang not in LANGUAGES:
        raise ValueError(f"the report's language must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    table = json.loads((ASSETS / "strings.json").read_text(encoding="utf-8"))
    return ReportWords(lang, table["report"], table["views"])
