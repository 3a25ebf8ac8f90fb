"""Who may read which request's text.

A visitor is identified by an owner token the server derives from their ``bs_visitor`` cookie
(identity.py), on every transport and in the Gradio handlers alike. A viewer reads the prompt and generated text of its own requests only
(and of ``PUBLIC`` ones, e.g. a replayed trace); other requests keep their ids, colours, lengths
and states but lose every token. ``shared`` (the --shared-view flag, for workshops) shows all
text; ``mine`` still marks each viewer's own requests. Owner tokens themselves never leave the
server: a viewer learns only ``mine``. Prefix-cache hits (a record's ``admitted`` and
``kv.cached``) are visible to every viewer: they show that another request shared a prompt
prefix, which is what prefix caching is, but never its tokens.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

PUBLIC = "*"
HIDDEN_TOKEN = -1  # stands in for each token id of a request the viewer may not read


def owner_token(secret: bytes, visitor_id: str) -> str:
    """An unguessable, stable token for one visitor (one browser's cookie)."""
    return hmac.new(secret, visitor_id.encode(), hashlib.sha256).hexdigest()[:24]


def new_secret() -> bytes:
    return secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class Audience:
    owner: str | None
    shared: bool = False

    def among(self, owners: set[str | None]) -> Audience:
        """This audience, or the anonymous one when it owns none of ``owners`` (the requests in
        view): both then see the same bytes, so viewers with made-up tokens share one frame."""
        return self if self.owner in owners else Audience(None, self.shared)

    def can_read(self, owner: str | None) -> bool:
        return self.shared or owner == PUBLIC or (owner is not None and owner == self.owner)

    def event(self, event: dict) -> dict:
        hidden_ids = [HIDDEN_TOKEN] * len(event.get("token_ids") or ())
        return self._view(event, prompt=None, label=None, text="", token_ids=hidden_ids)

    def entry(self, entry: dict) -> dict:
        return self._view(entry, prompt=None, label=None, text="")

    def _view(self, item: dict, **redacted) -> dict:
        out = {k: v for k, v in item.items() if k != "owner"}
        out["mine"] = self.owner is not None and item.get("owner") == self.owner
        out["visible"] = self.can_read(item.get("owner"))
        if not out["visible"]:
            out.update(redacted)
        return out

    def sampled(self, sampled: dict[str, int],
                owner_of: Callable[[str], str | None]) -> dict[str, int]:
        """A record's ``sampled`` map (its only per-viewer part), unreadable token ids hidden."""
        return {rid: tok if self.can_read(owner_of(rid)) else HIDDEN_TOKEN
                for rid, tok in sampled.items()}
