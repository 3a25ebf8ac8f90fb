"""The Compare controls of the live page: an arrival pattern (a preset, or a shipped trace's
arrivals), two engine configurations (policy and token budget), and Run. Run starts the
compare on its own thread and answers at once; the page's compare panel (assets/js/
compare_panel.js) polls ``/compare/state`` and plays the result from ``/compare/result``.

A compare loads the model twice and keeps the CPU busy for a while, so it is gated like the
presenter controls: hidden on a Space without a presenter key, and only for visitors who
entered the key when one is set.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import gradio as gr

from ..paths import ASSETS
from ..traces.trace import TraceError, load_trace
from ..ui.presenter import ALLOWED, MISSING, PresenterAccess
from ..ui.presets import PresetLibrary
from ..ui.strings import PAGE, PageError
from .pattern import ArrivalPattern, preset_pattern, trace_pattern
from .runner import CompareBusy, CompareRunner, CompareSide

if TYPE_CHECKING:
    from engine import AsyncLLM

TRACES = ASSETS / "traces"
TRACE_PREFIX = "trace:"
POLICIES = ("mixed", "prefill_first")  # engine/config.py's, without importing the engine here
DEFAULT_PATTERN = "article"


@dataclass
class CompareHandlers:
    runner: CompareRunner
    llm: AsyncLLM
    library: PresetLibrary
    access: PresenterAccess
    traces: Path = TRACES

    def choices(self) -> list[tuple[str, str]]:
        presets = self.library.choices()
        traces = [(PAGE.both("compare_trace", name=path.name), TRACE_PREFIX + path.name)
                  for path in sorted(self.traces.glob("*.jsonl*"))]
        return presets + traces

    def pattern(self, choice: str) -> ArrivalPattern:
        if not choice.startswith(TRACE_PREFIX):
            return preset_pattern(self.library, choice, self.llm.tokenizer)
        path = self.traces / Path(choice.removeprefix(TRACE_PREFIX)).name
        try:
            trace = load_trace(path)
        except (OSError, TraceError) as exc:
            raise ValueError(str(exc)) from None
        return trace_pattern(trace, path.name, self.library, self.llm.tokenizer)

    def run(self, choice: str, policy_a: str, budget_a: float, policy_b: str, budget_b: float,
            slow_ms: float, key: str) -> str:
        verdict = self.access.verdict(key)
        if verdict != ALLOWED:
            return self._refused(PAGE.both("key_needed" if verdict == MISSING else "key_wrong"))
        try:
            sides = (_side("A", policy_a, budget_a), _side("B", policy_b, budget_b))
            if self.llm.state != "ready":
                raise PageError("model_loading")
            pattern = self.pattern(choice)
            self.runner.start(pattern, sides, float(slow_ms or 0) / 1000)
        except CompareBusy:
            return self._refused(PAGE.both("compare_busy"))
        except (ValueError, RuntimeError, PageError) as exc:
            return self._refused(PAGE.both("compare_refused", reason=exc))
        return PAGE.both("compare_started", a=_said(sides[0]), b=_said(sides[1]),
                         n=len(pattern.planned))

    @staticmethod
    def _refused(message: str) -> str:
        gr.Warning(message)
        return message


def _side(label: str, policy: str, budget: float) -> CompareSide:
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if not budget or int(budget) < 1:
        raise ValueError(f"the token budget must be a positive integer, got {budget!r}")
    return CompareSide(label, policy, int(budget))


def _said(side: CompareSide) -> str:
    return f"{side.policy}, {side.budget}"


def compare_controls(handlers: CompareHandlers, key: gr.Textbox) -> None:
    """The Compare accordion (inside the page's Blocks), wired to ``handlers``."""
    budget = handlers.llm.config.max_num_batched_tokens
    with gr.Accordion(PAGE.both("compare"), open=False, visible=not handlers.access.hidden,
                      elem_id="bs-compare-controls"):
        gr.Markdown(PAGE.both("compare_about"), elem_classes="bs-compare-about")
        pattern = gr.Dropdown(handlers.choices(), value=DEFAULT_PATTERN,
                              label=PAGE.both("compare_pattern"), elem_id="bs-compare-pattern")
        with gr.Row():
            policy_a = gr.Radio(list(POLICIES), value="mixed", label=PAGE.both("compare_policy", side="A"),
                                elem_id="bs-compare-policy-a")
            budget_a = gr.Number(value=budget, precision=0, minimum=1, elem_id="bs-compare-budget-a",
                                 label=PAGE.both("compare_budget", side="A"))
        with gr.Row():
            policy_b = gr.Radio(list(POLICIES), value="prefill_first", elem_id="bs-compare-policy-b",
                                label=PAGE.both("compare_policy", side="B"))
            budget_b = gr.Number(value=budget, precision=0, minimum=1, elem_id="bs-compare-budget-b",
                                 label=PAGE.both("compare_budget", side="B"))
        slow = gr.Slider(0, 500, value=0, step=10, label=PAGE.both("compare_slow"),
                         elem_id="bs-compare-slow")
        run = gr.Button(PAGE.both("compare_run"), size="sm", elem_id="bs-compare-run")
        status = gr.Markdown(elem_id="bs-compare-status")
        gr.HTML(f'<button id="bs-compare-open" type="button" hidden>'
                f'{html.escape(PAGE.both("compare_show"))}</button>'
                '<div id="bs-compare-progress" class="bs-caption"></div>')
    run.click(handlers.run, [pattern, policy_a, budget_a, policy_b, budget_b, slow, key], status,
              api_name="compare", concurrency_limit=1)
