"""The OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions, plus
/healthz and /metrics. Requests go through the same AsyncLLM as the dashboard's, so they
join the same batch and show up in the same views (ids ``cmpl-<n>`` and ``chatcmpl-<n>``).
"""
from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from engine import AsyncLLM, EngineDeadError, ModelInfo, Prepared, PromptTooLongError, SamplingParams

from .body import read_body
from .calls import ApiCall, EventStreamResponse
from .errors import ApiError, bad_request, engine_failure, handle_api_error
from .limits import Admission, ApiLimits
from .logprobs import LogprobsWriter, TokenTexts
from .metrics import EngineMetrics
from .protocol import ChatCompletionBody, CompletionBody, GenerationBody
from .responses import CHAT, COMPLETIONS, Endpoint, Reply, sse, usage

MODEL_ALIASES = ("default", "batchscope")
OPENAI_DEFAULT_MAX_TOKENS = 16  # /v1/completions' default in OpenAI's API
PARAMS = ("prompt", "messages", "max_tokens")  # inputs a refused prompt's message may lead with
_request_numbers = itertools.count(1)  # process-wide: several apps may share one engine


def install_api(app: FastAPI, llm: AsyncLLM, limits: ApiLimits | None = None,
                pending: Callable[[], int] = lambda: 0) -> None:
    """Register the API routes on ``app`` (before anything is mounted at "/"). Its metrics
    subscribe to ``llm`` now and unsubscribe when the app shuts down; ``pending()``: the
    dashboard's requests not yet handed to ``llm``."""
    api = OpenAIApi(llm, limits or ApiLimits(), pending)
    app.add_exception_handler(ApiError, handle_api_error)
    app.include_router(api.router())
    close_on_shutdown(app, api.metrics.close)


def close_on_shutdown(app: FastAPI, close: Callable[[], None]) -> None:
    """Run ``close`` after the app's own lifespan ends (whatever lifespan it was given)."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(running_app):
        try:
            async with inner(running_app) as state:
                yield state
        finally:
            close()

    app.router.lifespan_context = lifespan


class OpenAIApi:
    def __init__(self, llm: AsyncLLM, limits: ApiLimits, pending: Callable[[], int] = lambda: 0):
        self.llm = llm
        self.limits = limits
        self.admission = Admission(limits)
        self.metrics = EngineMetrics(llm, pending)
        self.created = int(time.time())
        self._token_texts: TokenTexts | None = None  # once the tokenizer is loaded

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
        info = self._ready_model()
        return {"object": "list", "data": [{
            "id": info.name, "object": "model", "created": self.created,
            "owned_by": "batchscope", "max_model_len": info.max_model_len,
        }]}

    async def completions(self, request: Request) -> Response:
        info = self._ready_model()
        body = await read_body(request, CompletionBody, self.limits.max_body_bytes)
        self._check_model(info, body.model)
        params = self._sampling_params(body, min(OPENAI_DEFAULT_MAX_TOKENS, self.limits.max_tokens))
        prepared = await run_in_threadpool(self._prepare, self.llm.prepare, body.prompt, params, "prompt")
        return await self._generate(request, COMPLETIONS, info, body, prepared)

    async def chat_completions(self, request: Request) -> Response:
        info = self._ready_model()
        body = await read_body(request, ChatCompletionBody, self.limits.max_body_bytes)
        self._check_model(info, body.model)
        params = self._sampling_params(body, self.limits.max_tokens)
        messages = [m.as_template_message() for m in body.messages]
        prepared = await run_in_threadpool(self._prepare, self.llm.prepare_chat, messages, params, "messages")
        return await self._generate(request, CHAT, info, body, prepared)

    async def healthz(self) -> JSONResponse:
        info = self.llm.model_info
        body = {"status": self.llm.state, "model": info.name if info else None, "error": self.llm.error}
        return JSONResponse(body, status_code=200 if self.llm.state == "ready" else 503)

    async def prometheus(self) -> Response:
        return Response(self.metrics.exposition(), media_type=self.metrics.content_type)

    # ---- generation ----------------------------------------------------------------------
    async def _generate(self, request: Request, endpoint: Endpoint, info: ModelInfo,
                        body: GenerationBody, prepared: Prepared) -> Response:
        ticket = self.admission.admit(request.client.host if request.client else "unknown")
        request_id = f"{endpoint.id_prefix}-{next(_request_numbers)}"
        try:
            stream = self.llm.add_request(prepared, request_id=request_id)
        except BaseException as exc:  # e.g. the engine died or stopped meanwhile
            ticket.release()
            if isinstance(exc, EngineDeadError):
                raise self._unavailable() from None
            raise
        call = ApiCall(self.llm, stream, ticket)
        reply = Reply(endpoint, request_id, info.name, body.include_usage)
        writer = self._logprobs_writer(endpoint, prepared.params)
        num_prompt_tokens = len(prepared.token_ids)
        if body.stream:
            return EventStreamResponse(_events(call, reply, num_prompt_tokens, writer), on_close=call.close)
        try:
            outcome = await call.outcome(request)
        finally:
            call.close()
        if outcome.finish_reason == "error":
            raise engine_failure(outcome.error)
        logprobs = writer.part(outcome.token_ids, outcome.logprobs) if writer else None
        return JSONResponse(reply.full(outcome.text, outcome.finish_reason,
                                       usage(num_prompt_tokens, len(outcome.token_ids)), logprobs))

    def _logprobs_writer(self, endpoint: Endpoint, params: SamplingParams) -> LogprobsWriter | None:
        """Writes this response's ``logprobs`` fields, when it asked for them."""
        if params.logprobs is None:
            return None
        if self._token_texts is None:
            self._token_texts = TokenTexts(self.llm.tokenizer)
        return LogprobsWriter(endpoint.chat, params.logprobs, self._token_texts)

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
                                  stop=body.stop or [], logprobs=body.requested_logprobs)
        except ValueError as exc:
            raise bad_request(str(exc), param=_leading_word(str(exc))) from None

    # ---- prompts (run in a worker thread: tokenizing a long prompt takes a while) -----------
    def _prepare(self, prepare: Callable[..., Prepared], prompt, params: SamplingParams,
                 param: str) -> Prepared:
        try:
            return prepare(prompt, params, max_prompt_tokens=self.limits.max_prompt_tokens)
        except EngineDeadError:
            raise self._unavailable() from None
        except ValueError as exc:
            message = str(exc)
            leading = _leading_word(message)
            code = "context_length_exceeded" if isinstance(exc, PromptTooLongError) else None
            raise bad_request(message, param=leading if leading in PARAMS else param, code=code) from None

    # ---- model and state -----------------------------------------------------------------
    def _ready_model(self) -> ModelInfo:
        if self.llm.state == "loading":
            raise ApiError(503, "the model is still loading; retry in a few seconds",
                           type="service_unavailable", code="model_loading",
                           headers={"Retry-After": str(self.limits.retry_after_s)})
        info = self.llm.model_info
        if self.llm.state != "ready" or info is None:
            raise self._unavailable()
        return info

    def _unavailable(self) -> ApiError:
        detail = f": {self.llm.error}" if self.llm.error else ""
        return ApiError(503, f"the model is not available ({self.llm.state}{detail})",
                        type="service_unavailable", code="model_unavailable")

    @staticmethod
    def _check_model(info: ModelInfo, model: str) -> None:
        if model != info.name and model not in MODEL_ALIASES:
            raise ApiError(404, f"model {model!r} does not exist; this server serves "
                                f"{info.name!r} (aliases: {', '.join(MODEL_ALIASES)})",
                           param="model", code="model_not_found")


async def _events(call: ApiCall, reply: Reply, num_prompt_tokens: int,
                  writer: LogprobsWriter | None) -> AsyncIterator[bytes]:
    opening = reply.opening_chunk()  # with the first output, as vLLM does: clients time TTFT by it
    num_tokens = 0
    async for delta in call.deltas():
        if opening is not None:
            yield sse(opening)
            opening = None
        num_tokens += len(delta.token_ids)
        if delta.finish_reason == "error":  # OpenAI clients raise on an "error" event
            yield sse(engine_failure(delta.error).body())
            yield sse("[DONE]")
            return
        logprobs = writer.part(delta.token_ids, delta.logprobs) if writer else None
        if delta.text or delta.finished or logprobs:
            yield sse(reply.chunk(delta.text, delta.finish_reason, logprobs))
    if reply.include_usage:
        yield sse(reply.usage_chunk(usage(num_prompt_tokens, num_tokens)))
    yield sse("[DONE]")


def _leading_word(message: str) -> str | None:
    match = re.match(r"\w+", message)
    return match.group() if match else None
