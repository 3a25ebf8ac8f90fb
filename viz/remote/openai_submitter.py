"""RemoteSubmitter: the Fire button's requests sent to a vLLM server's OpenAI API (attach mode).

The same Submitter as Batchscope's own engine (viz/ui/submit.py), for an engine in another
process: its records come through the ingest (IngestSource), its requests go over HTTP.

- ``prepare`` counts a prompt's tokens with vLLM's ``/tokenize`` (chat messages through vLLM's
  own chat template) and refuses it over the dashboard's limit with the message Batchscope's
  engine gives (engine/prompts.py), or at the model's ``max_model_len``;
- ``submit`` registers the request's engine id (request_aliases.py: ``X-Request-Id`` makes it
  predictable), publishes its arrival, and streams the completion on a thread of its own,
  publishing each chunk's text and token ids (vLLM's ``return_token_ids``) as RequestEvents
  through the source, so the hub, the recorder and /metrics see them as they see a local
  engine's; a failure (vLLM down, a 4xx) ends the request's card with vLLM's reason;
- ``wait_for`` follows the requests' states in the records (the "after decoding" arrivals).

Chat presets use ``/v1/chat/completions``; raw text and token-id prompts ``/v1/completions``.
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from engine.prompts import Preparer
from engine.telemetry import RequestEvent

from ..ui.strings import PAGE, PageError
from .openai_endpoint import OpenAIEndpoint

if TYPE_CHECKING:
    from ..sources.ingest import IngestSource
    from ..ui.firing import PlannedRequest

log = logging.getLogger(__name__)
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


@dataclass(frozen=True, slots=True)
class RemoteRequest:
    """One prepared request: where it goes, its body, and what its arrival shows."""

    path: str
    body: dict
    num_prompt_tokens: int
    prompt_text: str | None

    def engine_id(self, header_id: str) -> str:
        """vLLM's external id for a request sent with ``X-Request-Id: header_id`` (its
        engine-core id appends 8 random characters)."""
        return f"chatcmpl-{header_id}" if self.path == CHAT else f"cmpl-{header_id}-0"


class RemoteTokenizer:
    """What presets ask of a tokenizer, asked of the server."""

    def __init__(self, endpoint: OpenAIEndpoint) -> None:
        self.endpoint = endpoint
        self._chat: bool | None = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.endpoint.tokenize({"prompt": text, "add_special_tokens": add_special_tokens})

    @property
    def chat_template(self) -> bool:
        """Whether the server renders chat messages (it refuses them without a template)."""
        if self._chat is None:
            try:
                self.endpoint.tokenize({"messages": [{"role": "user", "content": "hi"}]})
                self._chat = True
            except PageError as exc:
                if exc.key != "vllm_refused":
                    raise
                self._chat = False
        return self._chat


class RemoteSubmitter:
    def __init__(self, endpoint: OpenAIEndpoint, source: IngestSource) -> None:
        self.endpoint = endpoint
        self.source = source
        self.tokenizer = RemoteTokenizer(endpoint)

    def check_ready(self) -> None:
        status = self.source.status()
        if status["state"] == "loading":
            raise PageError("vllm_waiting")
        if status["state"] != "ready":
            raise PageError("vllm_gone", error=status["error"] or status["state"])

    def prepare(self, item: PlannedRequest, max_prompt_tokens: int | None) -> RemoteRequest:
        """The request's body, its prompt counted: ValueError over a limit, PageError when
        vLLM cannot be asked or refuses the prompt."""
        body = {"model": self.endpoint.model(), **_sampling(item.params), "return_token_ids": True}
        if item.chat:
            token_ids = self.endpoint.tokenize({"messages": item.prompt})
            what, path, body["messages"] = "messages", CHAT, item.prompt
        else:
            token_ids = item.prompt if isinstance(item.prompt, list) else self.tokenizer.encode(item.prompt)
            what, path, body["prompt"] = "prompt", COMPLETIONS, item.prompt
        Preparer._check_length(token_ids, what, max_prompt_tokens)  # the engine's limit, message
        limit = self.source.info().max_model_len
        if limit is not None and len(token_ids) >= limit:
            raise ValueError(f"{what}: {len(token_ids)} tokens, but vLLM's max_model_len is {limit}")
        text = item.prompt if isinstance(item.prompt, str) else None
        return RemoteRequest(path, body, len(token_ids), text)

    def submit(self, item: PlannedRequest) -> None:
        request: RemoteRequest = item.prepared
        header_id = f"{item.request_id}-{secrets.token_hex(4)}"
        self.source.aliases.add(request.engine_id(header_id), item.request_id)
        self._publish(RequestEvent("arrival", item.request_id, time.time(), request.prompt_text,
                                   request.num_prompt_tokens))
        threading.Thread(target=self._stream, args=(item.request_id, request, header_id),
                         name=f"batchscope-vllm-{item.request_id}", daemon=True).start()

    def wait_for(self, request_ids: list[str], states: set[str], timeout: float) -> bool:
        """The states the ingest folds from vLLM's records and this submitter's events."""
        return self.source.wait_for(request_ids, states, timeout)

    def _stream(self, rid: str, request: RemoteRequest, header_id: str) -> None:
        """Publish the completion's chunks as deltas; the last one says how it ended."""
        ended = False
        try:
            for chunk in self.endpoint.stream(request.path, request.body, {"X-Request-Id": header_id}):
                for choice in chunk.get("choices") or ():
                    ended = self._delta(rid, choice) or ended
            error = None if ended else "the stream ended without a finish reason"
        except PageError as exc:
            error = PAGE.both(exc.key, **exc.fields)
        except Exception as exc:  # noqa: BLE001 (a broken chunk ends this request only)
            log.exception("vLLM stream of %s failed", rid)
            error = str(exc) or type(exc).__name__
        if error is not None:
            self._publish(RequestEvent("delta", rid, time.time(), finished=True,
                                       finish_reason="error", error=error))

    def _delta(self, rid: str, choice: dict) -> bool:
        """Publish one choice of a chunk; True when it ends the request."""
        text = choice.get("text") if "text" in choice else (choice.get("delta") or {}).get("content")
        reason = choice.get("finish_reason")
        token_ids = list(choice.get("token_ids") or ())
        if text or token_ids or reason:
            self._publish(RequestEvent("delta", rid, time.time(), token_ids=token_ids,
                                       text=text or "", finished=reason is not None,
                                       finish_reason=reason))
        return reason is not None

    def _publish(self, event: RequestEvent) -> None:
        self.source.publish_event(event.to_dict())


def _sampling(params) -> dict:
    """Batchscope's SamplingParams as vLLM's request fields (the same names)."""
    return {name: value for name, value in asdict(params).items()
            if value is not None and value != []}
