"""The page's text: every label from the strings table in both languages, and every icon a
glyph the fonts of `make browser` (fonts-wqy-microhei) draw."""
from __future__ import annotations

import json
import shutil
import subprocess
import unicodedata

import pytest

from viz.ui import page
from viz.ui.strings import LANGUAGES, STRINGS_PATH, bilingual, load_strings, unmarked

FONT_FAMILY = "WenQuanYi Micro Hei"


def symbols(text: str) -> set[str]:
    """Characters of ``text`` that are neither letters, digits, CJK nor ASCII."""
    return {c for c in text if not c.isascii() and unicodedata.category(c)[0] in "SP"
            and not unicodedata.name(c, "").startswith(("CJK", "FULLWIDTH", "IDEOGRAPHIC"))}


def test_every_page_string_has_both_languages():
    table = json.loads(STRINGS_PATH.read_text(encoding="utf-8"))
    assert set(table) == {"page", "views", "report"}
    for section in ("page", "report"):
        for key, texts in table[section].items():
            assert all(texts.get(lang) for lang in LANGUAGES), f"{section}.{key}"
    fired = load_strings().both("fired", count=2, ids="A1, B2")
    assert unmarked(fired) == "Fired 2: A1, B2 · 已发射 2 个：A1, B2"
    assert fired == bilingual("Fired 2: A1, B2", "已发射 2 个：A1, B2")  # marked for the language switch


@pytest.mark.skipif(not shutil.which("fc-list"), reason="fontconfig's fc-list is not installed")
def test_icons_and_symbols_are_glyphs_of_the_installed_font():
    if FONT_FAMILY not in subprocess.run(["fc-list"], capture_output=True, text=True, check=False).stdout:
        pytest.skip("fonts-wqy-microhei is not installed (make browser)")
    texts = [page.PAUSE, page.STEP, page.PLAY, page.RECORD,
             *(t for texts in load_strings().table.values() for t in texts.values())]
    missing = []
    for char in sorted(set().union(*map(symbols, texts))):
        families = subprocess.run(["fc-list", f":charset={ord(char):x}", "family"],
                                  capture_output=True, text=True, check=False).stdout
        if FONT_FAMILY not in families:
            missing.append(f"{char} U+{ord(char):04X}")
    assert not missing


def test_page_errors_are_said_in_each_language():
    from viz.ui.strings import PAGE, PageError

    error = PageError("model_loading")
    assert str(error) == "the model is still loading"
    assert unmarked(PAGE.both("not_fired", reason=error)) == \
        "Not fired: the model is still loading · 未发射：模型仍在加载"
    assert unmarked(PAGE.both("not_fired", reason=ValueError("prompt too long"))).endswith(
        "未发射：prompt too long")


def test_the_replay_description_says_each_line_in_its_own_language():
    """The settings of a replayed run: the Chinese half says 开/关 and 核, not the English words."""
    from viz.sources.replay_channels import ReplayChannels
    from viz.traces.trace import load_trace

    trace_path = next((STRINGS_PATH.parent / "traces").glob("smollm2-*.jsonl.gz"))
    about = unmarked(page._trace_about(ReplayChannels(load_trace(trace_path), trace_path.name)))
    settings = next(line for line in about.splitlines() if line.startswith("Policy"))
    english, chinese = settings.split(" · ")
    assert "chunked prefill on" in english and "prefix caching on" in english
    assert "分块预填充 开" in chinese and "前缀缓存 开" in chinese and " on" not in chinese
