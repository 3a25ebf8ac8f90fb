"""The page's strings in English and Chinese, from assets/strings.json (section "page").

One table holds every string a viewer reads: the Gradio labels and messages come from its
"page" section through this module; the browser fetches the whole file from
``/batchscope/strings.json`` ("views" is the section the views draw). A text is shown in
both languages, "English · 中文", unless one is asked for; ``{name}`` fields are filled in.

A text in both languages carries invisible marks around each language (``bilingual``), so the
page shows the visitor's language alone, whatever component draws the text (a label, a button,
Markdown, a warning): assets/js/page_language.js reads the marks and drops them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..paths import ASSETS

STRINGS_PATH = ASSETS / "strings.json"
LANGUAGES = ("en", "zh")
JOINT = " · "
# Invisible format characters (Unicode "invisible operators"): what follows EN_MARK is English,
# JOINT_MARK the joint shown only with both languages, ZH_MARK Chinese, END_MARK every language.
EN_MARK, ZH_MARK, JOINT_MARK, END_MARK = "\u2062", "\u2063", "\u2064", "\u2061"


def bilingual(en: str, zh: str, joint: str = JOINT) -> str:
    """``en`` and ``zh`` as one text the page shows in the visitor's language ("en · zh" with
    both); one text when they say the same."""
    return en if en == zh else f"{EN_MARK}{en}{JOINT_MARK}{joint}{ZH_MARK}{zh}{END_MARK}"


def unmarked(text: str) -> str:
    """``text`` as the page shows it with both languages (for logs and tests)."""
    return text.translate({ord(mark): None for mark in (EN_MARK, ZH_MARK, JOINT_MARK, END_MARK)})


class PageError(Exception):
    """An error a visitor reads, named by its key in the table (shown in their language)."""

    def __init__(self, key: str, **fields):
        super().__init__(PAGE.en(key, **fields))
        self.key, self.fields = key, fields


class Phrase:
    """A text of the table given as a field of another text: said in that text's language."""

    def __init__(self, key: str, **fields):
        self.key, self.fields = key, fields


@dataclass(frozen=True, slots=True)
class Strings:
    table: dict[str, dict[str, str]]

    def text(self, key: str, language: str, **fields) -> str:
        """The text of ``key``; a field that is a ``Phrase`` or ``PageError`` is said in the same language."""
        fields = {name: self.text(value.key, language, **value.fields)
                  if isinstance(value, Phrase | PageError) else value for name, value in fields.items()}
        return self.table[key][language].format(**fields)

    def en(self, key: str, **fields) -> str:
        return self.text(key, "en", **fields)

    def zh(self, key: str, **fields) -> str:
        return self.text(key, "zh", **fields)

    def both(self, key: str, **fields) -> str:
        """"English · 中文", marked (``bilingual``)."""
        return bilingual(self.en(key, **fields), self.zh(key, **fields))


def load_strings(path: Path = STRINGS_PATH) -> Strings:
    page = json.loads(Path(path).read_text(encoding="utf-8"))["page"]
    for key, texts in page.items():
        missing = [lang for lang in LANGUAGES if not texts.get(lang)]
        if missing:
            raise ValueError(f"strings.json: page.{key} lacks {missing}")
    return Strings(page)


PAGE = load_strings()
