"""AsyncLLM: the concurrent front used by the dashboard and the HTTP API, and a RecordSource.

A narrow facade over the engine thread (``EngineLoop``): fronts prepare prompts on their own
thread (``prepare``/``prepare_chat``: validate and tokenize), hand them over
(``add_request`` returns the request's ``RequestStream``: iterate it from a thread or
``async for`` it from an event loop), and watch through plain data: record and event dicts
(``subscribe``, ``subscribe_events``), live ``counts()`` and ``status()``, and ``wait_for``
request states. Nothing outside engine/ needs the engine object itself. ``solo_check`` re-runs a
finished request alone and says whether it came out the same (solo_check.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .config import EngineConfig
from .engine_loop import EngineLoop
from .fanout import Fanout
from .info import ModelInfo, model_info, source_info
from .llm_engine import LLMEngine
from .prompts import Prepared, Prompt
from .record_source import SourceInfo
from .request_states import RequestStates
from .request_stream import RequestStream
from .sampling_params import SamplingParams
from .solo_check import RunLog, SoloChecker, SoloReport


class AsyncLLM:
    def __init__(self, model: str = "default", **config):
        self.model = model
        self._states = RequestStates()
        self._runs = RunLog()
        self._fanout = Fanout(self._states, on_deltas=self._runs.take)
        self._solo = SoloChecker(self, self._runs)
        self._loop = EngineLoop(model, EngineConfig.from_kwargs(**config), self._fanout)
        self._model_info: ModelInfo | None = None

    # ---- state -----------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """"loading" | "ready" | "failed" (load failed) | "dead" (thread died) | "stopped"."""
        return self._loop.state

    @property
    def error(self) -> str | None:
        """The load error or the cause of death, else None."""
        return self._loop.error

    @property
    def config(self) -> EngineConfig:
        """The engine's config as it is now (resolved once loaded; a reconfigure replaces it):
        frozen, so safe to read from any thread."""
        engine = self._loop.engine
        return engine.config if engine is not None else self._loop.config

    @property
    def engine(self) -> LLMEngine | None:
        """The engine itself, for tests that inject faults into its steps (tests/support/faults.py);
        product code goes through the methods below."""
        return self._loop.engine

    @property
    def model_info(self) -> ModelInfo | None:
        """Fixed facts of the loaded model and pool; None until loaded."""
        if self._model_info is None and self._loop.engine is not None:
            self._model_info = model_info(self._loop.engine)
        return self._model_info

    @property
    def tokenizer(self):
        """The model's Hugging Face tokenizer (read-only use), or None."""
        engine = self._loop.engine
        return engine.tokenizer if engine is not None else None

    def wait_ready(self, timeout: float | None = None) -> ModelInfo:
        self._loop.wait_ready(timeout)
        return self.model_info

    def shutdown(self) -> None:
        self._loop.stop()

    # ---- requests --------------------------------------------------------------------------
    def prepare(self, prompt: Prompt, params: SamplingParams | None = None, *,
                max_prompt_tokens: int | None = None) -> Prepared:
        """Validate and tokenize on the caller's thread (ValueError names the input at fault)."""
        preparer = self._loop.ready_engine().preparer
        prepared = preparer.prepare(prompt, params, max_prompt_tokens=max_prompt_tokens)
        if prepared.text is None:  # token ids: decoded here, never on the engine thread
            prepared = dataclasses.replace(prepared, text=preparer.detokenize(prepared.token_ids))
        return prepared

    def prepare_chat(self, messages: list[dict], params: SamplingParams | None = None, *,
                     max_prompt_tokens: int | None = None) -> Prepared:
        """The chat template applied; only the template's own special tokens are special."""
        preparer = self._loop.ready_engine().preparer
        return preparer.prepare_chat(messages, params, max_prompt_tokens=max_prompt_tokens)

    def add_request(self, prompt: Prepared | Prompt, params: SamplingParams | None = None,
                    request_id: str | None = None) -> RequestStream:
        """Queue a request for the next step and return its stream. A raw prompt is prepared
        first, on the caller's thread (ValueError); raises EngineDeadError once dead."""
        if not isinstance(prompt, Prepared):
            prompt = self.prepare(prompt, params)
        elif params is not None:
            raise ValueError("sampling_params: a Prepared prompt carries its own")
        request = self._loop.ready_engine().make_request(prompt, None, request_id)
        self._runs.start(request.request_id, prompt)
        return self._loop.add(request, prompt.text)

    def abort(self, request_id: str) -> None:
        self._loop.command("abort", request_id)

    def wait_for(self, request_ids: list[str], states: set[str], timeout: float) -> bool:
        """Block until every request is in one of ``states`` (as in the records: waiting,
        prefilling, decoding, preempted, finished); False on timeout."""
        return self._states.wait_for(request_ids, states, timeout)

    def solo_check(self, request_id: str, solo_request_id: str | None = None,
                   timeout: float = 120.0) -> SoloReport:
        """Re-run a finished request (one that kept its log-probabilities: greedy, or seeded) alone
        once the engine is idle, and compare: "same as alone" or where it first differs. Blocks;
        LookupError (not kept), ValueError (not comparable, or paused), TimeoutError (busy)."""
        return self._solo.check(request_id, solo_request_id, timeout)

    def detokenize(self, token_ids: list[int]) -> str | None:
        return self._loop.ready_engine().preparer.detokenize(token_ids)

    # ---- RecordSource ----------------------------------------------------------------------
    def subscribe(self, on_record: Callable[[dict], None]) -> Callable[[], None]:
        """Every step's IterationRecord as a dict (shared: read-only), on the engine thread."""
        return self._fanout.subscribe("record", on_record)

    def subscribe_events(self, on_event: Callable[[dict], None]) -> Callable[[], None]:
        """Every request's arrival and deltas as RequestEvent dicts, on the engine thread."""
        return self._fanout.subscribe("event", on_event)

    def counts(self) -> dict[str, int]:
        """Requests waiting (handed over, queued or preempted) and running, at this moment."""
        return self._states.counts()

    def info(self) -> SourceInfo:
        return source_info(self._loop.engine, self.model)

    def status(self) -> dict:
        loop = self._loop
        loading = loop.state == "loading"
        return {"state": loop.state, "error": loop.error, "paused": loop.paused,
                "load_seconds": loop.elapsed_loading() if loading else loop.load_seconds}

    # ---- presenter controls ----------------------------------------------------------------
    def pause(self) -> None:
        self._loop.pause()

    def resume(self) -> None:
        self._loop.resume()

    def step_once(self) -> None:
        """While paused, let exactly one more step run."""
        self._loop.step_once()

    @property
    def paused(self) -> bool:
        return self._loop.paused

    @property
    def min_step_interval(self) -> float:
        return self._loop.min_step_interval

    def set_min_step_interval(self, seconds: float) -> None:
        """Slow motion: each step takes at least this long (0 = full speed)."""
        if not 0 <= seconds <= 10:
            raise ValueError(f"min step interval must be in [0, 10] seconds, got {seconds}")
        self._loop.set_min_step_interval(seconds)

    def reset_prefix_cache(self, timeout: float = 30.0) -> int:
        """Forget every cached prefix block no running request holds, between steps (a
        presenter's fresh run: a demo fired again computes its prompts in full, as the first
        time). Blocks; returns how many blocks were freed, which the next record shows free."""
        return self._loop.call(LLMEngine.reset_prefix_cache, timeout)

    def reconfigure(self, **changes) -> dict[str, tuple]:
        """Change policy / token budget / chunked prefill / batch invariance from the next step
        on. Validated here (ValueError); returns what changes, ``{name: (before, after)}``, a
        budget raised so that a whole prompt fits one step included."""
        engine = self._loop.engine
        _, changed = (engine.reconfigured if engine is not None else self.config.reconfigured)(**changes)
        self._loop.command("reconfigure", changes)
        return changed
