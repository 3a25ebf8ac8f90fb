"""Request bodies of the OpenAI endpoints we serve (pydantic, strict types, unknown fields ignored).

Only the fields Batchscope can honour are declared; anything else a client sends (``user``,
``logit_bias``, ...) is ignored as OpenAI ignores what it does not know. Types are strict so
``"max_tokens": "10"`` is a 400 rather than a silent coercion; value ranges are checked by
``SamplingParams`` and ``ApiLimits`` so their messages name the limit.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.sampling_params import MAX_LOGPROBS

INT64 = 2**63
Seed = Annotated[int, Field(ge=-INT64, lt=INT64)]


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class StreamOptions(Body):
    include_usage: bool = False


class GenerationBody(Body):
    """Fields shared by completions and chat completions."""

    model: str = "default"
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Seed | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream and self.stream_options is not None and self.stream_options.include_usage

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def requested_logprobs(self) -> int | None:
        return None


class CompletionBody(GenerationBody):
    prompt: str | list[int]
    logprobs: int | None = None  # the top k per token, and the sampled token's

    @property
    def requested_logprobs(self) -> int | None:
        """k, or None when no log-probabilities are asked; ValueError names the field at fault."""
        return _checked_top("logprobs", self.logprobs)


class TextPart(Body):
    type: Literal["text"]
    text: str


class ChatMessage(Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def as_template_message(self) -> dict[str, str]:
        """The plain ``{"role", "content"}`` a chat template expects ("developer" is a system)."""
        content = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return {"role": "system" if self.role == "developer" else self.role, "content": content}


class ChatCompletionBody(GenerationBody):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None  # the sampled token's logprob per token
    top_logprobs: int | None = None  # and the top k (needs logprobs: true)

    @property
    def requested_logprobs(self) -> int | None:
        """k, or None when no log-probabilities are asked; ValueError names the field at fault."""
        if not self.logprobs:
            if self.top_logprobs is not None:
                raise ValueError("top_logprobs: needs logprobs set to true")
            return None
        return _checked_top("top_logprobs", 0 if self.top_logprobs is None else self.top_logprobs)

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


def _checked_top(field: str, k: int | None) -> int | None:
    if k is not None and not 0 <= k <= MAX_LOGPROBS:
        raise ValueError(f"{field}: must be an integer in [0, {MAX_LOGPROBS}], got {k}")
    return k
