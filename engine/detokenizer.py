"""Incremental detokenization with stop strings.

Text is released only when it is final: never a half multi-byte character (the tokenizer
shows those as U+FFFD), and never the first characters of what may become a stop string. So
the streamed deltas always concatenate to exactly the final text.
"""
from __future__ import annotations

from dataclasses import dataclass, field

REPLACEMENT_CHAR = "\ufffd"


@dataclass
class IncrementalDetokenizer:
    tokenizer: object
    stop: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    text: str = ""  # decoded text so far (before stop truncation)
    emitted: int = 0  # characters of ``text`` already released
    prefix_offset: int = 0
    read_offset: int = 0
    stopped: bool = False

    def add_token(self, token_id: int) -> str:
        """Append one token; return the newly final text (may be "")."""
        if self.stopped:
            return ""
        self.token_ids.append(token_id)
        prefix = self._decode(self.token_ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.token_ids[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith(REPLACEMENT_CHAR):
            self.text += full[len(prefix) :]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.token_ids)
        return self._release(final=False)

    def finish(self) -> str:
        """Release what was held back once the request ends."""
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if not self.stopped:
            hits = [at for stop in self.stop if (at := self.text.find(stop, self.emitted)) != -1]
            if hits:
                self.text = self.text[: min(hits)]
                self.stopped = True
        hold = 0 if final or self.stopped else max((len(s) - 1 for s in self.stop), default=0)
        end = max(self.emitted, len(self.text) - hold)
        delta = self.text[self.emitted : end]
        self.emitted = end
        return delta

    def _decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:  # token-id-only model: no text
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=True)
