"""What the dashboard's Gradio controls do: one method per control, wired by page.py.

Handlers know the visitor by the ``bs_visitor`` cookie (viz/live/identity.py) in ``gr.Request``, the
same identity the telemetry stream uses, and the browser tab by its Gradio session (a tab's
recording ends with the tab). Presenter controls check the key first and say whether it is
missing or wrong. Every text they return comes from the strings table, in both languages.
``llm`` is Batchscope's own engine, which the presenter steers (pause, step, policy...);
attached to an engine in another process (vLLM) there is none: the page then offers firing
and Record only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import gradio as gr

from ..live.identity import VisitorIdentity
from ..traces.recording import Recorder
from .firing import Firing, Knobs, plan_shot
from .presenter import ALLOWED, MISSING, WRONG, PresenterAccess
from .presets import Preset, PresetLibrary
from .strings import PAGE, PageError, Phrase, Strings

if TYPE_CHECKING:
    from engine import AsyncLLM

    from ..compare.controls import CompareHandlers

KEY_MESSAGES = {MISSING: "key_needed", WRONG: "key_wrong"}


@dataclass
class DashboardHandlers:
    llm: AsyncLLM | None  # None: attached to an engine in another process
    firing: Firing
    library: PresetLibrary
    identity: VisitorIdentity
    recorder: Recorder
    access: PresenterAccess
    strings: Strings = PAGE
    compare: CompareHandlers | None = None  # the Compare controls (viz/compare/), when offered

    # ---- firing ----------------------------------------------------------------------------
    def preset(self, preset_id: str) -> tuple:
        chosen = self.library.presets[preset_id]
        return (chosen.description, chosen.count, chosen.max_tokens, chosen.temperature,
                chosen.spacing_ms)

    def fire(self, preset_id: str, text: str, count: float, max_tokens: float,
             temperature: float, spacing_ms: float, key: str | None = None,
             request: gr.Request = None) -> str:
        """Fire a shot for this visitor; the presenter (a key set and entered) is not capped."""
        knobs = Knobs(int(count), int(max_tokens), float(temperature), float(spacing_ms))
        presenter = self.access.key is not None and self.access.allows(key)
        try:
            planned = plan_shot(self.library, self.library.presets[preset_id], knobs,
                                self.firing.submitter.tokenizer, text or "")
            ids = self.firing.fire(planned, self.owner(request), presenter)
        except (ValueError, RuntimeError, PageError) as exc:
            gr.Warning(self.strings.both("not_fired", reason=exc))
            return self.strings.both("not_fired", reason=exc)
        if not (text or "").strip() and self.access.allows(key):
            self._warn_unpacked(self.library.presets[preset_id])
        return self.strings.both("fired", count=len(ids), ids=", ".join(ids))

    def _warn_unpacked(self, preset: Preset) -> None:
        """Whoever may steer fired a preset built to show one packed step (the article's 102
        rows) under a policy or budget that never shows it: say why and what to change. The
        shot runs all the same (it still shows the rest of the scenario)."""
        if self.llm is None:  # attached to another engine: its settings are not ours to read
            return
        config = self.llm.config  # (the budget it runs with: raised for a whole prompt when unchunked)
        why = preset.unpacked_by(config.policy, config.max_num_batched_tokens)
        if why is not None:
            gr.Warning(self.strings.both(why.key, **why.fields))

    # ---- presenter -------------------------------------------------------------------------
    def pause(self, key: str) -> str:
        return self._presenting(key, self.llm.pause)

    def step(self, key: str) -> str:
        def step_one() -> None:
            if not self.llm.paused:
                self.llm.pause()
            self.llm.step_once()
        return self._presenting(key, step_one)

    def resume(self, key: str) -> str:
        return self._presenting(key, self.llm.resume)

    def slow(self, ms: float, key: str) -> str:
        def slow_down() -> str:
            try:
                self.llm.set_min_step_interval(float(ms) / 1000)
            except ValueError as exc:
                return self._not_applied(exc)
            return self.strings.both("slow_motion_on", ms=int(ms)) if ms else \
                self.strings.both("full_speed")
        return self._keyed(key, slow_down)

    def apply(self, policy: str, budget: float, chunked: bool, invariant: bool, key: str) -> str:
        return self._keyed(key, lambda: self._reconfigure(policy, int(budget or 0), bool(chunked), bool(invariant)))

    def _reconfigure(self, policy: str, budget: int, chunked: bool, invariant: bool) -> str:
        cap = self.llm.config.max_token_budget
        if budget < 1 or (cap is not None and budget > cap):  # said in the page's words, not the engine's
            return self._not_applied(Phrase("token_budget_range", max=cap))
        try:
            self.llm.reconfigure(policy=policy, max_num_batched_tokens=budget, enable_chunked_prefill=chunked,
                                 batch_invariant=invariant)
        except ValueError as exc:
            return self._not_applied(exc)
        return self.strings.both("applied", policy=policy, chunked=Phrase("on" if chunked else "off"),
                                 invariant=Phrase("on" if invariant else "off"),
                                 budget=effective_budget(self.llm, budget, chunked))

    def budget_range(self) -> dict:
        """The budget field's range, said under it once the engine knows it (asked on each page
        load: the page is built while the model may still load)."""
        cap = self.llm.config.max_token_budget
        return gr.update(info=self.strings.both("token_budget_range", max=cap)) if cap else gr.update()

    def fresh_run(self, key: str) -> str:
        """The engine forgets its idle prefix cache, so a demo fired again (chunked prefill,
        prefix caching) computes its prompts in full, as it did the first time."""
        def reset() -> str:
            try:
                freed = self.llm.reset_prefix_cache()
            except (RuntimeError, TimeoutError) as exc:  # not ready, dead, or busy too long
                return self._not_applied(exc)
            return self.strings.both("fresh_run_done", blocks=freed)
        return self._keyed(key, reset)

    def _not_applied(self, reason: Exception | Phrase) -> str:
        """A control the engine refused: the status text, also shown as a warning."""
        message = self.strings.both("not_applied", reason=reason)
        gr.Warning(message)
        return message

    # ---- recording -------------------------------------------------------------------------
    def record(self, on: bool, key: str, request: gr.Request) -> tuple:
        """The Record toggle: start this tab's recording, or stop it and offer the file."""
        refused = self._refusal(key)
        if refused is not None:
            return False, gr.DownloadButton(interactive=False), refused
        tab = request.session_hash
        if not on:
            return self._stopped(self.recorder.stop(tab))
        try:
            self.firing.submitter.check_ready()  # a recording needs its source's header
        except PageError as exc:
            message = self.strings.both("not_recording", reason=exc)
            gr.Warning(message)
            return False, gr.DownloadButton(interactive=False), message
        self.recorder.start(tab, self.owner(request))
        return (True, gr.DownloadButton(value=None, interactive=False),
                self.strings.both("recording", steps=self.recorder.limits.max_records))

    def _stopped(self, path) -> tuple:
        if path is None:
            return False, gr.DownloadButton(interactive=False), ""
        return (False, gr.DownloadButton(value=str(path), interactive=True),
                self.strings.both("recorded", name=path.name))

    def tab_closed(self, request: gr.Request) -> None:
        """The tab is gone (Gradio's unload): its recording ends and its files go."""
        self.recorder.discard(request.session_hash)

    # ---- helpers ---------------------------------------------------------------------------
    def owner(self, request: gr.Request | None) -> str | None:
        return self.identity.owner(request.cookies) if request is not None else None

    def _presenting(self, key: str, control) -> str:
        def run() -> str:
            control()
            return self.strings.both("paused" if self.llm.paused else "running")
        return self._keyed(key, run)

    def _keyed(self, key: str, control) -> str:
        """``control()``'s status text, or why the key refuses it (also as a warning)."""
        refused = self._refusal(key)
        return refused if refused is not None else control()

    def _refusal(self, key: str) -> str | None:
        verdict = self.access.verdict(key)
        if verdict == ALLOWED:
            return None
        message = self.strings.both(KEY_MESSAGES.get(verdict, "key_needed"))
        gr.Warning(message)
        return message


def effective_budget(llm: AsyncLLM, budget: int, chunked: bool) -> int:
    """The budget the engine will run with: without chunked prefill it raises it so a whole
    prompt fits one step (the engine's own rule, EngineConfig.reconfigured)."""
    config, _ = llm.config.reconfigured(max_num_batched_tokens=budget, enable_chunked_prefill=chunked)
    return config.max_num_batched_tokens
