"""The OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions, plus
/healthz and /metrics. Requests go through the same AsyncLLM as the dashboard's, so they
join the same batch and show up in the same views (ids ``cmpl-<n>`` and ``chatcmpl-<n>``).
"""
from __future__ import annotations

import itertools
import re
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from jinja2 import TemplateError
from starlette.concurrency import run_in_threadpool

from engine import AsyncLLM, LLMEngine, SamplingParams

from .body import read_body
from .calls import ApiCall, EventStreamResponse
from .errors import ApiError, bad_request, engine_failure, handle_api_error
from .limits import Admission, ApiLimits
from .metrics import EngineMetrics
from .protocol import ChatCompletionBody, ChatMessage, CompletionBody, GenerationBody
from .responses import CHAT, COMPLETIONS, Endpoint, Reply, sse, usage

MODEL_ALIASES = ("default", "batchscope")
OPENAI_DEFAULT_MAX_TOKENS = 16  # /v1/completions' default in OpenAI's API
_request_numbers = itertools.count(1)  # process-wide: several apps may share one engine


def install_api(app: FastAPI, llm: AsyncLLM, limits: ApiLimits | None = None) -> None:
    """Register the API routes on ``app`` (before anything is mounted at "/")."""
    api = OpenAIApi(llm, limits or ApiLimits())
    app.add_exception_handler(ApiError, handle_api_error)
    app.include_router(api.router())


class OpenAIApi:
    def __init__(self, llm: AsyncLLM, limits: ApiLimits):
        self.llm = llm
        self.limits = limits
        self.admission = Admission(limits)
        self.metrics = EngineMetrics(llm)
        self.created = int(time.time())

    def router(self) -> APIRouter:
        router = APIRouter()
        router.add_api_route("/v1/models", self.models, methods=["GET"])
        router.add_api_route("/v1/completions", self.completions, methods=["POST"])
        router.add_api_route("/v1/chat/completions", self.chat_completions, methods=["POST"])
        router.add_api_route("/healthz", self.healthz, methods=["GET"])
        router.add_api_route("/metrics", self.prometheus, methods=["GET"])
        return router

    # ---- routes --------------------------------------------------------------------------
    async def models(self) -> dict:
        engine = self._ready_engine()
        return {"object": "list", "data": [{
            "id": engine.model_name, "object": "model", "created": self.created,
            "owned_by": "batchscope", "max_model_len": engine.config.max_model_len,
        }]}

    async def completions(self, request: Request) -> Response:
        engine = self._ready_engine()
        body = await read_body(request, CompletionBody, self.limits.max_body_bytes)
        self._check_model(engine, body.model)
        prompt_ids = await run_in_threadpool(self._tokenize, engine, body.prompt, "prompt")
        default = min(OPENAI_DEFAULT_MAX_TOKENS, self.limits.max_tokens)
        return await self._generate(request, COMPLETIONS, engine, body, prompt_ids, default)

    async def chat_completions(self, request: Request) -> Response:
        engine = self._ready_engine()
        body = await read_body(request, ChatCompletionBody, self.limits.max_body_bytes)
        self._check_model(engine, body.model)
        prompt_ids = await run_in_threadpool(self._chat_prompt, engine, body.messages)
        return await self._generate(request, CHAT, engine, body, prompt_ids, self.limits.max_tokens)

    async def healthz(self) -> JSONResponse:
        engine = self.llm.engine
        body = {"status": self.llm.state, "model": engine.model_name if engine else None,
                "error": self.llm.load_error}
        return JSONResponse(body, status_code=200 if self.llm.state == "ready" else 503)

    async def prometheus(self) -> Response:
        return Response(self.metrics.exposition(), media_type=self.metrics.content_type)

    # ---- generation ----------------------------------------------------------------------
    async def _generate(self, request: Request, endpoint: Endpoint, engine: LLMEngine,
                        body: GenerationBody, prompt_ids: list[int], default_max_tokens: int) -> Response:
        params = self._sampling_params(body, default_max_tokens)
        ticket = self.admission.admit(request.client.host if request.client else "unknown")
        request_id = f"{endpoint.id_prefix}-{next(_request_numbers)}"
        try:
            stream = self.llm.add_request(prompt_ids, params, request_id=request_id)
        except BaseException as exc:  # e.g. RuntimeError: the engine stopped meanwhile
            ticket.release()
            if isinstance(exc, ValueError):  # prompt + max_tokens could never fit the KV pool
                raise bad_request(str(exc), param="max_tokens") from None
            raise
        call = ApiCall(self.llm, stream, ticket)
        reply = Reply(endpoint, request_id, engine.model_name, body.include_usage)
        if body.stream:
            return EventStreamResponse(_events(call, reply, len(prompt_ids)), on_close=call.close)
        try:
            outcome = await call.outcome(request)
        finally:
            call.close()
        if outcome.finish_reason == "error":
            raise engine_failure(outcome.error)
        return JSONResponse(reply.full(outcome.text, outcome.finish_reason,
                                       usage(len(prompt_ids), outcome.num_tokens)))

    def _sampling_params(self, body: GenerationBody, default_max_tokens: int) -> SamplingParams:
        if body.n != 1:
            raise bad_request(f"n: only n=1 is supported, got {body.n}; send separate requests",
                              param="n")
        max_tokens = body.requested_max_tokens
        max_tokens = default_max_tokens if max_tokens is None else max_tokens
        if max_tokens > self.limits.max_tokens:
            raise bad_request(f"max_tokens: {max_tokens} is over this server's limit of "
                              f"{self.limits.max_tokens}", param="max_tokens")
        try:
            return SamplingParams(max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p,
                                  top_k=body.top_k, min_p=body.min_p, seed=body.seed,
                                  stop=body.stop or [])
        except ValueError as exc:
            raise bad_request(str(exc), param=_leading_word(str(exc))) from None

    # ---- prompts (run in a worker thread: tokenizing a long prompt takes a while) -----------
    def _tokenize(self, engine: LLMEngine, prompt: str | list[int], param: str) -> list[int]:
        try:
            token_ids = engine.tokenize(prompt)
        except ValueError as exc:
            raise bad_request(str(exc), param=param) from None
        if len(token_ids) > self.limits.max_prompt_tokens:
            raise bad_request(f"{param}: {len(token_ids)} tokens, over this server's limit of "
                              f"{self.limits.max_prompt_tokens}", param=param,
                              code="context_length_exceeded")
        return token_ids

    def _chat_prompt(self, engine: LLMEngine, messages: list[ChatMessage]) -> list[int]:
        tokenizer = engine.tokenizer
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise bad_request("messages: this model has no chat template; use /v1/completions",
                              param="messages")
        try:
            text = tokenizer.apply_chat_template([m.as_template_message() for m in messages],
                                                 tokenize=False, add_generation_prompt=True)
        except TemplateError as exc:
            raise bad_request(f"messages: the model's chat template rejected them: {exc}",
                              param="messages") from None
        return self._tokenize(engine, text, "messages")

    # ---- model and state -----------------------------------------------------------------
    def _ready_engine(self) -> LLMEngine:
        if self.llm.state == "loading":
            raise ApiError(503, "the model is still loading; retry in a few seconds",
                           type="service_unavailable", code="model_loading",
                           headers={"Retry-After": str(self.limits.retry_after_s)})
        if self.llm.state != "ready" or self.llm.engine is None:
            detail = f": {self.llm.load_error}" if self.llm.load_error else ""
            raise ApiError(503, f"the model is not available ({self.llm.state}{detail})",
                           type="service_unavailable", code="model_unavailable")
        return self.llm.engine

    @staticmethod
    def _check_model(engine: LLMEngine, model: str) -> None:
        if model != engine.model_name and model not in MODEL_ALIASES:
            raise ApiError(404, f"model {model!r} does not exist; this server serves "
                                f"{engine.model_name!r} (aliases: {', '.join(MODEL_ALIASES)})",
                           param="model", code="model_not_found")


async def _events(call: ApiCall, reply: Reply, num_prompt_tokens: int) -> AsyncIterator[bytes]:
    opening = reply.opening_chunk()
    if opening is not None:
        yield sse(opening)
    num_tokens = 0
    async for delta in call.deltas():
        num_tokens += len(delta.token_ids)
        if delta.finish_reason == "error":  # OpenAI clients raise on an "error" event
            yield sse(engine_failure(delta.error).body())
            yield sse("[DONE]")
            return
        if delta.text or delta.finished:
            yield sse(reply.chunk(delta.text, delta.finish_reason))
    if reply.include_usage:
        yield sse(reply.usage_chunk(usage(num_prompt_tokens, num_tokens)))
    yield sse("[DONE]")


def _leading_word(message: str) -> str | None:
    match = re.match(r"\w+", message)
    return match.group() if match else None
