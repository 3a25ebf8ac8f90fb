"""Workload presets (assets/presets.json): what the Fire button sends.

A preset lists request specs and default knobs (count, max tokens, temperature, arrival
spacing). A spec is either a chat ``prompt`` (wrapped in the model's chat template, after the
preset's optional ``system`` prompt) or an exact-length raw prompt: ``tokens`` tokens cut from a
named text, so a view can show exact row counts (the article's 1 + 1 + 100 = 102).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..paths import ASSETS
from .strings import Phrase, bilingual

PRESETS_PATH = ASSETS / "presets.json"


@dataclass(frozen=True, slots=True)
class RequestSpec:
    prompt: str | None = None  # a chat message
    text: str | None = None  # key into the file's "texts", used with ``tokens``
    tokens: int | None = None  # exact prompt length in tokens (raw, no chat template)
    label: str = "q"  # request id prefix, e.g. "A" -> "A7"
    max_tokens: int | None = None  # overrides the preset's (slider's) value
    min_max_tokens: int | None = None  # the slider's value, but at least this many
    after_decoding: bool = False  # arrive once every earlier request of the shot is decoding


@dataclass(frozen=True, slots=True)
class Preset:
    id: str
    title: str
    title_zh: str
    about: str
    about_zh: str
    requests: tuple[RequestSpec, ...]
    count: int
    max_tokens: int
    temperature: float
    spacing_ms: int
    system: str | None = None
    chat: bool = True
    fixed: bool = False  # the request list is the workload: count and spacing do not apply
    ignore_eos: bool = False  # every request generates exactly its max tokens
    label: str = ""  # the dropdown's short name (the title is shown whole below it)
    label_zh: str = ""

    @property
    def description(self) -> str:
        """What the page shows about the preset, its whole title first, in both languages
        (Markdown)."""
        return bilingual(f"**{self.title}**: {self.about}", f"**{self.title_zh}**：{self.about_zh}", joint="\n\n")

    @property
    def packed_step_rows(self) -> int | None:
        """The rows of the one step a fixed shot whose last request arrives once the others
        decode is built to show: each earlier request's decode packed with the last one's whole
        prefill (the article's 1 + 1 + 100 = 102). None for any other preset."""
        last = self.requests[-1]
        if not (self.fixed and last.after_decoding and last.tokens):
            return None
        return len(self.requests) - 1 + last.tokens

    def unpacked_by(self, policy: str, token_budget: int) -> Phrase | None:
        """Why an engine with this ``policy`` and ``token_budget`` (the one it runs with, raised
        for a whole prompt when chunking is off) never shows that step, with what to change; None
        when it can (or the preset has no such step)."""
        rows = self.packed_step_rows
        if rows is None:
            return None
        if policy != "mixed":  # prefill_first runs a step of prefills alone
            return Phrase("packed_needs_mixed", rows=rows, policy=policy)
        if token_budget < rows:  # the last prompt's prefill is cut into chunks
            return Phrase("packed_needs_budget", rows=rows, budget=token_budget)
        return None


@dataclass(frozen=True, slots=True)
class PresetLibrary:
    presets: dict[str, Preset]
    texts: dict[str, str]

    @property
    def default(self) -> Preset:
        return next(iter(self.presets.values()))

    def choices(self) -> list[tuple[str, str]]:
        """(label, id) pairs for a dropdown: the short names, which fit its width."""
        return [(bilingual(p.label, p.label_zh), p.id) for p in self.presets.values()]


def load_presets(path: Path = PRESETS_PATH) -> PresetLibrary:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    texts = data.get("texts", {})
    presets = {}
    for raw in data["presets"]:
        specs = tuple(RequestSpec(**spec) for spec in raw.pop("requests"))
        for spec in specs:
            if (spec.prompt is None) == (spec.tokens is None):
                raise ValueError(f"preset {raw['id']!r}: each request needs a prompt or tokens")
            if spec.tokens is not None and spec.text not in texts:
                raise ValueError(f"preset {raw['id']!r}: unknown text {spec.text!r}")
        presets[raw["id"]] = Preset(requests=specs, **raw)
    return PresetLibrary(presets, texts)
