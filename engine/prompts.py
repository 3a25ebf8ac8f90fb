"""Prompts in, validated token ids out: what every front does before a request may queue.

``Preparer`` holds only what does not change while the engine runs (tokenizer, vocabulary,
``max_model_len``, the pool's size), so it is safe to call from any thread, off the engine
thread and off an event loop (tokenizing a long prompt takes a while). Every refusal is a
ValueError whose message starts with the input at fault ("prompt:", "messages:",
"max_tokens:"), so the dashboard and the API show one message for one limit.

Chat messages go through the model's chat template with transformers'
``sanitize_control_tokens``: only the special tokens the template writes are special, and a
message that spells ``<|im_start|>`` is tokenized as that plain text, so it cannot forge a
turn. A raw text prompt (``prepare``) is tokenized as given, special tokens included: a
completion prompt is the caller's whole input by design.
"""
from __future__ import annotations

from dataclasses import dataclass

from .sampling_params import SamplingParams

Prompt = str | list[int]


class PromptTooLongError(ValueError):
    """The prompt is over the front's ``max_prompt_tokens`` limit."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated prompt: its token ids, its sampling parameters, and its text for viewers
    (the prompt itself or the decoded token ids; None when not decoded or no tokenizer)."""

    token_ids: tuple[int, ...]
    params: SamplingParams
    text: str | None


@dataclass(frozen=True)
class Preparer:
    tokenizer: object | None
    vocab_size: int
    max_model_len: int
    block_size: int
    num_kv_blocks: int

    def prepare(self, prompt: Prompt, params: SamplingParams | None = None, *,
                max_prompt_tokens: int | None = None) -> Prepared:
        params = checked_params(params)
        token_ids = self.tokenize(prompt)
        self._check_length(token_ids, "prompt", max_prompt_tokens)
        self.check_fits(len(token_ids), params)
        return Prepared(tuple(token_ids), params, prompt if isinstance(prompt, str) else None)

    def prepare_chat(self, messages: list[dict], params: SamplingParams | None = None, *,
                     max_prompt_tokens: int | None = None) -> Prepared:
        params = checked_params(params)
        token_ids = self._chat_token_ids(messages)
        self._check_tokens(token_ids, "messages")
        self._check_length(token_ids, "messages", max_prompt_tokens)
        self.check_fits(len(token_ids), params)
        return Prepared(tuple(token_ids), params, self.detokenize(token_ids))

    def tokenize(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt, validated against the vocabulary and ``max_model_len``."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("prompt: this model has no tokenizer; pass a list of token ids")
            token_ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, (list, tuple)):
            token_ids = list(prompt)
        else:
            raise ValueError(f"prompt: expected a string or a list of token ids, got {type(prompt).__name__}")
        self._check_tokens(token_ids, "prompt")
        return token_ids

    def check_fits(self, num_prompt_tokens: int, params: SamplingParams) -> None:
        """Reject a request whose longest possible run could never fit the KV pool."""
        longest = min(num_prompt_tokens + params.max_tokens, self.max_model_len) - 1
        needed = -(-longest // self.block_size)
        if needed > self.num_kv_blocks:
            raise ValueError(
                f"max_tokens: the request needs up to {needed} KV blocks ({longest} tokens) but the "
                f"pool has num_kv_blocks={self.num_kv_blocks}; lower max_tokens or the prompt"
            )

    def detokenize(self, token_ids: list[int] | tuple[int, ...]) -> str | None:
        return self.tokenizer.decode(list(token_ids)) if self.tokenizer is not None else None

    def _chat_token_ids(self, messages: list[dict]) -> list[int]:
        from jinja2 import TemplateError

        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("messages: this model has no chat template; send a plain prompt")
        try:
            return list(self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, sanitize_control_tokens=True, return_dict=False))
        except TemplateError as exc:
            raise ValueError(f"messages: the model's chat template rejected them: {exc}") from None

    def _check_tokens(self, token_ids: list[int], what: str) -> None:
        bad = next((t for t in token_ids if not _is_token(t, self.vocab_size)), None)
        if bad is not None:
            raise ValueError(f"{what}: token id {bad!r} is outside the vocabulary [0, {self.vocab_size})")
        if not token_ids:
            raise ValueError(f"{what}: must contain at least one token")
        if len(token_ids) >= self.max_model_len:
            raise ValueError(
                f"{what}: {len(token_ids)} tokens, but max_model_len is {self.max_model_len} "
                "(the prompt must leave room for at least one generated token)"
            )

    @staticmethod
    def _check_length(token_ids: list[int], what: str, max_prompt_tokens: int | None) -> None:
        if max_prompt_tokens is not None and len(token_ids) > max_prompt_tokens:
            raise PromptTooLongError(f"{what}: {len(token_ids)} tokens, over this server's limit of "
                                     f"{max_prompt_tokens} prompt tokens")


def checked_params(params: SamplingParams | None) -> SamplingParams:
    params = params or SamplingParams()
    if not isinstance(params, SamplingParams):
        raise ValueError(f"sampling_params: expected SamplingParams, got {type(params).__name__}")
    params.validate()
    return params


def _is_token(value, vocab_size: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab_size
