"""Firing: turn a preset (or a typed prompt) into timed requests and submit them.

``plan_shot`` builds the list of requests with their arrival offsets; ``fire`` prepares
them all at once through the submitter (validated and counted, under the same prompt limit as
the API, so a bad prompt fails the click, not a background thread), and hands them over from a
background thread that keeps the arrival pattern (spacing, or "after the earlier ones are
decoding", asked of the engine with ``wait_for``), claiming each id for the visitor in the hub
first. A visitor's requests take their share (fair_queue.py: a cap on those in flight, turns
over visitors); the presenter's, and those fired for no visitor, go straight to the engine. The
submitter is the engine behind the page: Batchscope's own, or a vLLM server reached through its
OpenAI API (submit.py says what it does).
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, replace

from engine.sampling_params import SamplingParams
from engine.telemetry import RequestEvent

from ..live.hub import TelemetryHub
from .fair_queue import ENGINE_WINDOW, PAGE_MAX_IN_FLIGHT, FairShare
from .presets import Preset, PresetLibrary, RequestSpec
from .strings import PAGE, PageError
from .submit import Submitter

log = logging.getLogger(__name__)
AFTER_DECODING_TIMEOUT_S = 60.0
_request_numbers = itertools.count(1)
_shot_numbers = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Knobs:
    count: int
    max_tokens: int
    temperature: float
    spacing_ms: float


@dataclass(slots=True)
class PlannedRequest:
    request_id: str
    prompt: str | list[int] | list[dict]  # text or token ids, or chat messages
    label: str  # what the visitor's own text panel shows as the prompt
    params: SamplingParams
    delay_s: float  # after the shot starts (ignored when after_decoding)
    after_decoding: bool = False
    prepared: object | None = None  # what the submitter prepared (set by ``Firing.fire``)

    @property
    def chat(self) -> bool:
        return bool(self.prompt) and isinstance(self.prompt[0], dict)


def plan_shot(library: PresetLibrary, preset: Preset, knobs: Knobs, tokenizer,
              custom_prompt: str = "") -> list[PlannedRequest]:
    """The requests of one click. A typed prompt replaces the preset's prompts (sent as a
    plain chat message, ``count`` times)."""
    shot = next(_shot_numbers)
    if custom_prompt.strip():
        preset = Preset("custom", "", "", "", "", (RequestSpec(prompt=custom_prompt),),
                        knobs.count, knobs.max_tokens, knobs.temperature, int(knobs.spacing_ms))
    if preset.fixed:
        specs, spacing = list(preset.requests), 0.0
    else:
        cycle = itertools.cycle(preset.requests)
        specs, spacing = [next(cycle) for _ in range(knobs.count)], knobs.spacing_ms / 1000
    planned = []
    for i, spec in enumerate(specs):
        rid = f"{spec.label}{next(_request_numbers)}"
        prompt, label = _prompt(library, preset, spec, tokenizer, f"{rid}, shot {shot}")
        max_tokens = spec.max_tokens or max(knobs.max_tokens, spec.min_max_tokens or 0)
        params = SamplingParams(max_tokens=max_tokens, temperature=knobs.temperature,
                                ignore_eos=preset.ignore_eos)
        planned.append(PlannedRequest(rid, prompt, label, params, i * spacing, spec.after_decoding))
    return planned


class Firing:
    """Submits planned shots to one engine and counts the requests still ``pending``: fired
    from the dashboard but not yet handed to the engine (a staggered arrival, "after the
    earlier ones are decoding", a visitor's turn still to come)."""

    def __init__(self, submitter: Submitter, hub: TelemetryHub,
                 max_prompt_tokens: int | None = None, max_in_flight: int = PAGE_MAX_IN_FLIGHT,
                 engine_window: int = ENGINE_WINDOW):
        """``max_prompt_tokens``: the API's limit (``--api-max-prompt-tokens``), so that both
        paths refuse the same prompts with the same message; ``max_in_flight`` and
        ``engine_window``: each visitor's share (fair_queue.py)."""
        self.submitter = submitter
        self.hub = hub
        self.max_prompt_tokens = max_prompt_tokens
        self.share = FairShare(submitter, self._hand_over, hub.publish_event, max_in_flight,
                               engine_window)
        self._pending = 0
        self._lock = threading.Lock()

    def pending(self) -> int:
        return self._pending

    def fire(self, planned: list[PlannedRequest], owner: str | None,
             presenter: bool = False) -> list[str]:
        """Validate every request now (ValueError, PageError), keep what fits the visitor's
        share (PageError when nothing does; a warning when not all), then submit them in the
        background. The presenter, and a shot for no visitor, are not counted."""
        self.submitter.check_ready()
        prepared = [replace(item, prepared=self.submitter.prepare(item, self.max_prompt_tokens))
                    for item in planned]
        shared = owner if owner is not None and not presenter else None
        if shared is not None:
            prepared = self._admitted(shared, prepared)
        self._count(len(prepared))
        for item in prepared:
            self.hub.fired(item.request_id, owner, item.label)
        thread = threading.Thread(target=self.submit, args=(prepared, shared),
                                  name="batchscope-fire", daemon=True)
        thread.start()
        return [item.request_id for item in prepared]

    def _admitted(self, owner: str, prepared: list[PlannedRequest]) -> list[PlannedRequest]:
        cap = self.share.max_in_flight
        fits = self.share.admit(owner, prepared)
        if not fits:
            raise PageError("fire_cap_full", cap=cap)
        if len(fits) < len(prepared):
            import gradio as gr  # a warning on the visitor's page (a Python warning outside one)
            gr.Warning(PAGE.both("fire_capped", fired=len(fits), asked=len(prepared), cap=cap,
                                 rest=len(prepared) - len(fits)))
        return fits

    def submit(self, planned: list[PlannedRequest], owner: str | None = None) -> None:
        """Hand each prepared request to the engine at its time (on the shot's thread), or to
        ``owner``'s turns."""
        started = time.monotonic()
        submitted: list[str] = []
        for item in planned:
            if item.after_decoding:
                self.submitter.wait_for(submitted, {"decoding", "finished"},
                                        AFTER_DECODING_TIMEOUT_S)
            elif (wait := started + item.delay_s - time.monotonic()) > 0:
                time.sleep(wait)
            if owner is not None:
                self.share.put(owner, item)
                submitted.append(item.request_id)
            elif self._hand_over(item):
                submitted.append(item.request_id)

    def _hand_over(self, item: PlannedRequest) -> bool:
        try:
            self.submitter.submit(item)
        except Exception as exc:  # e.g. the engine stopped: finish the claimed entry
            log.exception("could not submit %s", item.request_id)
            self.hub.publish_event(RequestEvent(
                "delta", item.request_id, time.time(), finished=True, finish_reason="error",
                error=str(exc)).to_dict())
            return False
        finally:
            self._count(-1)
        return True

    def _count(self, change: int) -> None:
        with self._lock:
            self._pending += change


def _prompt(library: PresetLibrary, preset: Preset, spec: RequestSpec, tokenizer,
            nonce: str) -> tuple[str | list[int] | list[dict], str]:
    if spec.tokens is not None:
        return _exact_tokens(library.texts[spec.text], spec.tokens, tokenizer, nonce), (
            PAGE.both("token_prompt", tokens=spec.tokens))
    if not preset.chat or tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return spec.prompt, spec.prompt
    messages = [{"role": "system", "content": preset.system}] if preset.system else []
    messages.append({"role": "user", "content": spec.prompt})
    return messages, spec.prompt


def _exact_tokens(text: str, num_tokens: int, tokenizer, nonce: str) -> list[int]:
    """``num_tokens`` token ids of ``text``, led by a nonce so no prefix-cache hit shortens
    the prefill a preset means to show."""
    if tokenizer is None:
        raise PageError("needs_tokenizer")
    ids = tokenizer.encode(f"[{nonce}] {text}")
    while len(ids) < num_tokens:  # continuations: no second BOS in the middle
        ids += tokenizer.encode(" " + text, add_special_tokens=False)
    return ids[:num_tokens]
