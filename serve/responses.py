"""The JSON OpenAI clients expect: whole responses, stream chunks and server-sent events."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Endpoint:
    """What differs between /v1/completions and /v1/chat/completions."""

    id_prefix: str
    object: str
    chunk_object: str
    chat: bool

    def choice(self, text: str, finish_reason: str | None, logprobs: dict | None = None) -> dict:
        if self.chat:
            return {"index": 0, "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs, "finish_reason": finish_reason}
        return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}

    def chunk_choice(self, text: str, finish_reason: str | None, logprobs: dict | None = None) -> dict:
        if self.chat:
            delta = {"content": text} if text else {}
            return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return self.choice(text, finish_reason, logprobs)


COMPLETIONS = Endpoint("cmpl", "text_completion", "text_completion", chat=False)
CHAT = Endpoint("chatcmpl", "chat.completion", "chat.completion.chunk", chat=True)


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


@dataclass
class Reply:
    """One response's identity (id, model, creation time) and its serialisations."""

    endpoint: Endpoint
    id: str
    model: str
    include_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    def full(self, text: str, finish_reason: str | None, usage_: dict, logprobs: dict | None = None) -> dict:
        choice = self.endpoint.choice(text, finish_reason, logprobs)
        return {**self._head(self.endpoint.object), "choices": [choice], "usage": usage_}

    def opening_chunk(self) -> dict | None:
        """Chat streams open with the assistant's role, as OpenAI's do (sent with the first
        output, as vLLM sends it)."""
        if not self.endpoint.chat:
            return None
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return self._chunk([choice])

    def chunk(self, text: str, finish_reason: str | None, logprobs: dict | None = None) -> dict:
        return self._chunk([self.endpoint.chunk_choice(text, finish_reason, logprobs)])

    def usage_chunk(self, usage_: dict) -> dict:
        return {**self._head(self.endpoint.chunk_object), "choices": [], "usage": usage_}

    def _chunk(self, choices: list[dict]) -> dict:
        chunk = {**self._head(self.endpoint.chunk_object), "choices": choices}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _head(self, object_: str) -> dict:
        return {"id": self.id, "object": object_, "created": self.created, "model": self.model}


def sse(data: dict | str) -> bytes:
    """One server-sent event; ``data`` is a JSON object or the literal ``[DONE]``."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()
