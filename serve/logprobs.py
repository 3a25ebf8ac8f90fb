"""Log-probabilities in OpenAI's shapes, from the engine's per-token ``TokenLogprobs``.

- /v1/completions (``logprobs: k``): ``{"tokens", "token_logprobs", "top_logprobs",
  "text_offset"}``, where ``top_logprobs`` maps token text -> logprob for the top k and the sampled
  token (so up to k + 1 entries, as OpenAI says) and ``text_offset`` is each token's character
  offset in the generated text, counted over the token texts (continued across stream chunks).
- /v1/chat/completions (``logprobs: true``, ``top_logprobs: k``): ``{"content": [{"token",
  "logprob", "bytes", "top_logprobs": [k x {"token", "logprob", "bytes"}]}], "refusal": None}``.

A token's text is the tokenizer's decoding of that token alone (a piece of a multi-byte character
reads as U+FFFD); ``bytes`` are its exact UTF-8 bytes, taken from the byte-level BPE alphabet
when the tokenizer is byte-level. A model without a tokenizer names tokens ``token_id:<id>``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from engine.outputs import TokenLogprobs


@functools.cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character that stands for each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


class TokenTexts:
    """Each token id's text and bytes, looked up once (read-only use of the tokenizer)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.byte_level = type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token_id: int) -> tuple[str, list[int]]:
        found = self._cache.get(token_id)
        if found is None:
            found = self._cache[token_id] = self._lookup(token_id)
        return found

    def _lookup(self, token_id: int) -> tuple[str, list[int]]:
        if self.tokenizer is None:
            text = f"token_id:{token_id}"
            return text, list(text.encode())
        text = self.tokenizer.decode([token_id])
        piece = self.tokenizer.convert_ids_to_tokens(token_id) if self.byte_level else None
        decoder = byte_decoder()
        if piece and all(c in decoder for c in piece):
            return text, [decoder[c] for c in piece]
        return text, list(text.encode())


@dataclass
class LogprobsWriter:
    """The ``logprobs`` field of one response's choice (or of each of its stream chunks)."""

    chat: bool
    top: int  # k: how many alternatives per token
    texts: TokenTexts
    offset: int = 0  # completions: characters of the token texts written so far

    def part(self, token_ids: list[int], entries: list[TokenLogprobs] | None) -> dict | None:
        """The field for these tokens; None when there are none (a chunk that only finishes)."""
        if not token_ids or not entries:
            return None
        if self.chat:
            return {"content": [self._chat_entry(t, e) for t, e in zip(token_ids, entries, strict=True)],
                    "refusal": None}
        return self._completion_part(token_ids, entries)

    def _chat_entry(self, token_id: int, entry: TokenLogprobs) -> dict:
        top = list(entry.logprobs.items())[:self.top]
        return {**self._chat_token(token_id, entry.logprobs[token_id]),
                "top_logprobs": [self._chat_token(i, lp) for i, lp in top]}

    def _chat_token(self, token_id: int, logprob: float) -> dict:
        text, raw = self.texts(token_id)
        return {"token": text, "logprob": logprob, "bytes": raw}

    def _completion_part(self, token_ids: list[int], entries: list[TokenLogprobs]) -> dict:
        part = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for token_id, entry in zip(token_ids, entries, strict=True):
            text = self.texts(token_id)[0]
            part["tokens"].append(text)
            part["token_logprobs"].append(entry.logprobs[token_id])
            part["top_logprobs"].append({self.texts(i)[0]: lp for i, lp in entry.logprobs.items()})
            part["text_offset"].append(self.offset)
            self.offset += len(text)
        return part
