"""OpenAIEndpoint: the few calls attach mode makes to an OpenAI-compatible server (vLLM's).

``GET /v1/models`` (the served model's name), ``POST /tokenize`` (vLLM's: prompt lengths, and
token ids for the exact-length presets), and streamed ``POST /v1/completions`` /
``/v1/chat/completions`` (Server-Sent Events, one JSON chunk per ``data:`` line, ``[DONE]``
last). Every failure becomes a PageError a visitor can read: the server cannot be reached
("vllm_down", with the URL), or it refused the request ("vllm_refused", with its status and its
own message, e.g. a prompt over its ``max_model_len``). Synchronous httpx, called from Gradio's
worker threads and from one thread per streamed request; one client, shared (thread-safe).
"""
from __future__ import annotations

import json
from collections.abc import Iterator

import httpx

from ..ui.strings import PageError

CONNECT_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 30.0  # models, tokenize
STREAM_READ_TIMEOUT_S = 600.0  # a queued request may wait long for its first token


class OpenAIEndpoint:
    def __init__(self, base_url: str, api_key: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, transport=transport,
                                    timeout=httpx.Timeout(CALL_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
                                    limits=httpx.Limits(max_connections=64))
        self._model: str | None = None

    def model(self) -> str:
        """The served model's name (the first of ``/v1/models``), asked once."""
        if self._model is None:
            models = self._call("GET", "/v1/models").get("data") or []
            if not models:
                raise PageError("vllm_refused", status=200, message="it serves no model")
            self._model = str(models[0]["id"])
        return self._model

    def tokenize(self, body: dict) -> list[int]:
        """Token ids of ``{"prompt": text}`` or ``{"messages": [...]}`` (vLLM's /tokenize)."""
        return list(self._call("POST", "/tokenize", json={"model": self.model(), **body})["tokens"])

    def stream(self, path: str, body: dict, headers: dict[str, str]) -> Iterator[dict]:
        """The JSON chunks of a streamed completion, as they come."""
        timeout = httpx.Timeout(CALL_TIMEOUT_S, connect=CONNECT_TIMEOUT_S, read=STREAM_READ_TIMEOUT_S)
        try:
            with self._client.stream("POST", path, json={**body, "stream": True}, headers=headers,
                                     timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _refused(response)
                for line in response.iter_lines():
                    if line.startswith("data:") and (data := line[5:].strip()) != "[DONE]":
                        yield json.loads(data)
        except httpx.HTTPError as exc:
            raise self._down(exc) from None

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, **kwargs) -> dict:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise self._down(exc) from None
        if response.status_code >= 400:
            raise _refused(response)
        return response.json()

    def _down(self, exc: Exception) -> PageError:
        return PageError("vllm_down", url=self.base_url, reason=str(exc) or type(exc).__name__)


def _refused(response: httpx.Response) -> PageError:
    """vLLM's own message: ``{"error": {"message"}}`` (OpenAI's shape) or ``{"message"}``."""
    try:
        body = response.json()
        error = body.get("error", body) if isinstance(body, dict) else {}
        message = error.get("message") if isinstance(error, dict) else str(error)
    except ValueError:
        message = None
    return PageError("vllm_refused", status=response.status_code,
                     message=str(message or response.text[:300] or response.reason_phrase))
