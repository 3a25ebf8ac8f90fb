"""Which script a page shows: every string a visitor reads (visible text, the SVG text of the
charts, placeholders, the chosen preset, the tab's title), minus what the visitor wrote, what the
model generated and the language switch's names of the languages, checked for the other language's script.

English mode may show no Chinese character. Chinese mode may show Latin words only where the
Chinese table itself uses them (technical terms it keeps in English: token, KV, prefill, ...),
identifiers that are the same in every language (policy names, the model's and the trace's
names, request ids), and numbers and units."""
from __future__ import annotations

import json
import re

from chromium import ROOT

CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
WORD = re.compile(r"[A-Za-z][A-Za-z_]+")
# What the visitor wrote or the model generated, and the language switch (each language named
# in its own script, so a visitor can always find theirs).
USER_TEXT = ".bs-req-prompt, .bs-req-text, #bs-prompt, .bs-lang"
SHOWN = """
  const skip = arguments[0], parts = [document.title];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (el && !el.closest(skip) && !el.closest('script, style') && el.checkVisibility()
        && node.textContent.trim()) parts.push(node.textContent.trim());
  }
  for (const el of document.querySelectorAll('input, textarea')) {
    if (el.closest(skip) || !el.checkVisibility()) continue;
    if (el.placeholder) parts.push(el.placeholder);
    if (el.getAttribute('role') === 'combobox' && el.value) parts.push(el.value);
  }
  return parts;"""


def shown_strings(driver, skip: str = "") -> list[str]:
    """What the page shows, less the visitor's text and ``skip`` (more selectors)."""
    return driver.execute_script(SHOWN, ", ".join(filter(None, [USER_TEXT, skip])))


def chinese_table_words() -> set[str]:
    """The Latin words the Chinese texts of the strings table and the presets use themselves."""
    strings = json.loads((ROOT / "assets" / "strings.json").read_text(encoding="utf-8"))
    presets = json.loads((ROOT / "assets" / "presets.json").read_text(encoding="utf-8"))
    texts = [entry["zh"] for section in strings.values() for entry in section.values()]
    texts += [p.get(k, "") for p in presets["presets"] for k in ("label_zh", "title_zh", "about_zh")]
    return {w.lower() for text in texts for w in WORD.findall(str(text))}


def other_script(strings: list[str], lang: str, allowed: set[str] = frozenset()) -> list[str]:
    """The strings that show the other language's script in ``lang`` ("en" or "zh")."""
    if lang == "en":
        return [s for s in strings if CJK.search(s)]
    known = chinese_table_words() | {w.lower() for name in allowed for w in WORD.findall(name)}
    return [s for s in strings if any(w.lower() not in known for w in WORD.findall(s))]
