"""Arrival patterns for a compare: the requests of a preset (with its arrival rules: spacing,
"once the earlier ones decode") or the arrivals of a recorded trace (each request's arrival
time, prompt and output length), planned once so that both runs get the very same requests.

Both runs must produce the same tokens, so every request is greedy and generates exactly its
max tokens (``ignore_eos``). A compare is bounded: at most ``MAX_REQUESTS`` requests of at
most ``MAX_OUTPUT_TOKENS`` tokens, and a trace's quiet gaps longer than ``MAX_GAP_S`` are
shortened; ``capped`` says when a limit changed the pattern (the page says so).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from ..traces.trace import Trace
from ..ui.firing import Knobs, PlannedRequest, plan_shot
from ..ui.presets import Preset, PresetLibrary, RequestSpec

MAX_REQUESTS = 16
MAX_OUTPUT_TOKENS = 64
MAX_GAP_S = 5.0
TRACE_TEXT = "long"  # the presets' text that stands in for a prompt a trace does not hold


@dataclass(frozen=True)
class ArrivalPattern:
    kind: str  # "preset" | "trace"
    name: str  # the preset's id or the trace's file name
    title: dict[str, str]  # {"en", "zh"}
    planned: tuple[PlannedRequest, ...]
    capped: bool = False

    def describe(self) -> list[dict]:
        """What the page shows of each request: id, prompt length, max tokens, arrival."""
        return [{"request_id": p.request_id, "prompt_tokens": _prompt_tokens(p),
                 "max_tokens": p.params.max_tokens, "delay_s": round(p.delay_s, 3),
                 "after_decoding": p.after_decoding} for p in self.planned]


def _prompt_tokens(planned: PlannedRequest) -> int | None:
    prompt = planned.prompt
    return len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else None


def _exact(planned: PlannedRequest, max_tokens: int) -> PlannedRequest:
    """Greedy, exactly ``max_tokens`` tokens (capped), the same in both runs."""
    params = replace(planned.params, temperature=0.0, ignore_eos=True,
                     max_tokens=min(max_tokens, MAX_OUTPUT_TOKENS))
    return replace(planned, params=params)


def preset_pattern(library: PresetLibrary, preset_id: str, tokenizer) -> ArrivalPattern:
    """The preset's requests with its default knobs (ValueError for an unknown preset)."""
    preset = library.presets.get(preset_id)
    if preset is None:
        raise ValueError(f"unknown preset {preset_id!r}")
    knobs = Knobs(min(preset.count, MAX_REQUESTS), preset.max_tokens, 0.0, preset.spacing_ms)
    planned = plan_shot(library, preset, knobs, tokenizer)
    capped = len(planned) > MAX_REQUESTS or any(p.params.max_tokens > MAX_OUTPUT_TOKENS for p in planned)
    return ArrivalPattern("preset", preset.id, {"en": preset.title, "zh": preset.title_zh},
                          tuple(_exact(p, p.params.max_tokens) for p in planned[:MAX_REQUESTS]), capped)


def trace_pattern(trace: Trace, name: str, library: PresetLibrary, tokenizer) -> ArrivalPattern:
    """The trace's first ``MAX_REQUESTS`` arrivals: their times, their prompts (or prompts of
    the same length when the trace holds no text) and their output lengths."""
    arrivals = [e for e in trace.events if e["kind"] == "arrival"]
    if not arrivals:
        raise ValueError(f"{name}: the trace holds no arrivals")
    outputs: dict[str, int] = {}
    for record in trace.records:
        for segment in record["segments"]:
            if segment["sampled"]:
                outputs[segment["request_id"]] = outputs.get(segment["request_id"], 0) + 1
    kept = arrivals[:MAX_REQUESTS]
    specs = tuple(_trace_spec(e) for e in kept)
    preset = Preset("trace", name, name, "", "", specs, len(specs), MAX_OUTPUT_TOKENS, 0.0, 0,
                    chat=False, fixed=True, ignore_eos=True)
    planned = plan_shot(library, preset, Knobs(len(specs), MAX_OUTPUT_TOKENS, 0.0, 0), tokenizer)
    delays, gaps_cut = _delays([e["time"] for e in kept])
    wanted = [max(1, outputs.get(e["request_id"], 1)) for e in kept]
    planned = [replace(_exact(p, n), delay_s=d) for p, n, d in zip(planned, wanted, delays, strict=True)]
    capped = len(arrivals) > MAX_REQUESTS or gaps_cut or max(wanted) > MAX_OUTPUT_TOKENS
    return ArrivalPattern("trace", name, {"en": name, "zh": name}, tuple(planned), capped)


def _trace_spec(arrival: dict) -> RequestSpec:
    if arrival.get("prompt"):
        return RequestSpec(prompt=arrival["prompt"], label="r")
    return RequestSpec(text=TRACE_TEXT, tokens=max(1, arrival.get("num_prompt_tokens") or 1), label="r")


def _delays(times: list[float]) -> tuple[list[float], bool]:
    """Arrival offsets from the first arrival, each quiet gap shortened to ``MAX_GAP_S``."""
    delays, cut = [0.0], False
    for before, after in itertools.pairwise(times):
        gap = max(0.0, after - before)
        cut = cut or gap > MAX_GAP_S
        delays.append(delays[-1] + min(gap, MAX_GAP_S))
    return delays, cut
