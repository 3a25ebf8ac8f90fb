"""A loopback stand-in for vLLM's OpenAI server, for the attach-mode tests that need no vLLM:
``/v1/models``, ``/tokenize`` (one token per word, BOS first), and streamed completions that
echo the prompt's words back one token per chunk with vLLM's ``token_ids``. It keeps every
request (headers and body) and can refuse them like vLLM does (``refuse``: path -> status)."""
from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

MODEL = "SmolLM2-135M-Instruct"


def words(text: str) -> list[str]:
    return text.split() or ["."]


def token_ids(text: str) -> list[int]:
    return [1] + [100 + len(w) for w in words(text)]


@dataclass
class FakeOpenAI:
    requests: list[dict] = field(default_factory=list)  # {"path", "headers", "body"}
    refuse: dict[str, int] = field(default_factory=dict)
    # cleared: every stream holds its last chunk until set again (a request still running)
    flowing: threading.Event = field(default_factory=lambda: _set(threading.Event()))

    def app(self) -> FastAPI:
        app = FastAPI()
        app.add_api_route("/v1/models", self.models, methods=["GET"])
        for path in ("/tokenize", "/v1/completions", "/v1/chat/completions"):
            app.add_api_route(path, self.handle, methods=["POST"])
        return app

    async def models(self) -> dict:
        return {"object": "list", "data": [{"id": MODEL, "object": "model"}]}

    async def handle(self, request: Request):
        body = await request.json()
        path = request.url.path
        self.requests.append({"path": path, "headers": dict(request.headers), "body": body})
        if path in self.refuse:
            return JSONResponse({"error": {"message": f"refused {path}", "type": "BadRequestError",
                                           "code": self.refuse[path]}}, status_code=self.refuse[path])
        text = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
        if path == "/tokenize":
            return {"tokens": token_ids(text if isinstance(text, str) else "x " * len(text)),
                    "count": 0, "max_model_len": 2048}
        return StreamingResponse(self._chunks(path, body, text), media_type="text/event-stream")

    def last(self, path: str) -> dict:
        return [r for r in self.requests if r["path"] == path][-1]

    async def _chunks(self, path: str, body: dict, text):
        reply = words(text)[: body["max_tokens"]] if isinstance(text, str) else ["tok"] * body["max_tokens"]
        for k, word in enumerate(reply):
            last = k == len(reply) - 1
            while last and not self.flowing.is_set():
                await asyncio.sleep(0.01)
            choice = {"index": 0, "token_ids": [100 + len(word)],
                      "finish_reason": "length" if last else None}
            if path.endswith("chat/completions"):
                choice["delta"] = {"content": " " + word}
            else:
                choice["text"] = " " + word
            yield f"data: {json.dumps({'id': 'x', 'choices': [choice]})}\n\n"
        yield "data: [DONE]\n\n"


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event
