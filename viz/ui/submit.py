"""Submitter: where the Fire button's requests go, behind one small interface.

Firing (firing.py) plans a shot, validates every request at the click and hands them over one
by one at their arrival times; only these five things depend on the engine behind it:

- ``tokenizer``: what presets need to cut exact-length token prompts and to know whether the
  model has a chat template (``encode(text, add_special_tokens=...)``, ``chat_template``);
- ``check_ready()``: raise a PageError while the engine cannot take requests;
- ``prepare(item, max_prompt_tokens)``: validate and count one request's prompt now (a
  ValueError with one clear message, the same limit as the API), returning what ``submit``
  needs;
- ``submit(item)``: hand one prepared request over under ``item.request_id``; its events
  (arrival, text deltas, the end) reach the dashboard through the record source;
- ``wait_for(ids, states, timeout)``: wait until those requests reach one of the states
  (the "after the earlier ones are decoding" arrivals).

Two implementations: ``LocalSubmitter`` (Batchscope's own AsyncLLM, in this process) and
viz/remote/openai_submitter.py's ``RemoteSubmitter`` (an OpenAI-compatible vLLM server whose
records come in through the ingest). This module imports the engine for typing only.
"""
from __future__ import annotations

import secrets
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from .strings import PageError

if TYPE_CHECKING:
    from engine import AsyncLLM
    from engine.sampling_params import SamplingParams

    from .firing import PlannedRequest


class Submitter(Protocol):
    @property
    def tokenizer(self): ...

    def check_ready(self) -> None: ...

    def prepare(self, item: PlannedRequest, max_prompt_tokens: int | None) -> object: ...

    def submit(self, item: PlannedRequest) -> None: ...

    def wait_for(self, request_ids: list[str], states: set[str], timeout: float) -> bool: ...


class LocalSubmitter:
    """Batchscope's own engine: prompts prepared by its facade, requests added to it."""

    def __init__(self, llm: AsyncLLM) -> None:
        self.llm = llm

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    def check_ready(self) -> None:
        state = self.llm.state
        if state == "loading":
            raise PageError("model_loading")
        if state != "ready":
            raise PageError("engine_state", state=state, error=self.llm.error)

    def prepare(self, item: PlannedRequest, max_prompt_tokens: int | None) -> object:
        """Validated and tokenized as the API would (ValueError, with the API's message); chat
        prompts through ``prepare_chat``, so typed text never becomes the template's tokens.
        Each request is made checkable against a solo run (engine/solo_check.py)."""
        prepare = self.llm.prepare_chat if item.chat else self.llm.prepare
        return prepare(item.prompt, solo_checkable(item.params), max_prompt_tokens=max_prompt_tokens)

    def submit(self, item: PlannedRequest) -> None:
        self.llm.add_request(item.prepared, request_id=item.request_id)

    def wait_for(self, request_ids: list[str], states: set[str], timeout: float) -> bool:
        return self.llm.wait_for(request_ids, states, timeout)


def solo_checkable(params: SamplingParams) -> SamplingParams:
    """``params`` with what a solo check needs: the sampled token's log-probability, and a seed of
    its own (random, so runs still vary). Only Batchscope's own engine offers the check; a remote
    vLLM gets the visitor's settings alone."""
    return replace(params, logprobs=0 if params.logprobs is None else params.logprobs,
                   seed=secrets.randbits(63) if params.seed is None else params.seed)
