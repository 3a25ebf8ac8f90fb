"""Who a visitor is: a random id in an HttpOnly cookie, ``bs_visitor``.

The server sets the cookie on the first response to a browser that has none (any page,
Gradio's own included) and derives the visitor's owner token from it with an HMAC under the
server's secret (privacy.owner_token). The websocket, the SSE stream and the Gradio handlers
all read the same cookie, so identity survives a reload and never appears in a URL, a frame
or the page's JavaScript (HttpOnly). A request without the cookie gets a fresh id, written
into the request's own cookie header as well, so even that first request (say, the Gradio
page) already has its visitor. API clients (``/v1``, ``/metrics``, ``/healthz``) are left
alone: they are not visitors of the page.

Over plain http (a laptop, a workshop LAN) the cookie is SameSite=Lax. Over https it is
SameSite=None; Secure; Partitioned: a Hugging Face Space shows the app (*.hf.space) inside an
iframe of huggingface.co, a cross-site frame to which browsers send no Lax cookie, so every
request there would look like a new visitor. Partitioned (CHIPS) keeps the cookie per
top-level site, which browsers that block third-party cookies still allow.
"""
from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from http.cookies import CookieError, SimpleCookie

from .privacy import owner_token

COOKIE = "bs_visitor"
MAX_AGE_S = 30 * 24 * 3600
_VALID = re.compile(r"[0-9a-f]{32}")  # 128 random bits, hex
NOT_VISITORS = ("/v1/", "/metrics", "/healthz")


def new_visitor_id() -> str:
    return secrets.token_hex(16)


def valid(visitor_id: str | None) -> bool:
    return bool(visitor_id) and _VALID.fullmatch(visitor_id) is not None


class VisitorIdentity:
    """Owner tokens from visitor cookies, under one server secret."""

    def __init__(self, secret: bytes):
        self._secret = secret

    def owner(self, cookies: Mapping[str, str] | None) -> str | None:
        """The owner token of the visitor whose cookies these are; None without a valid one."""
        visitor = (cookies or {}).get(COOKIE)
        return owner_token(self._secret, visitor) if valid(visitor) else None


class VisitorCookies:
    """ASGI middleware (``app.add_middleware(VisitorCookies)``): sets ``bs_visitor`` on the
    responses to HTTP requests that lack a valid one."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(NOT_VISITORS) or \
                valid(_cookie(scope["headers"])):
            await self.app(scope, receive, send)
            return
        visitor = new_visitor_id()
        scope = {**scope, "headers": _with_cookie(scope["headers"], visitor)}
        secure = scope.get("scheme") == "https"

        async def send_with_cookie(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.append((b"set-cookie", set_cookie_header(visitor, secure).encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def set_cookie_header(visitor: str, secure: bool = False) -> str:
    attributes = f"{COOKIE}={visitor}; Path=/; Max-Age={MAX_AGE_S}; HttpOnly"
    return attributes + ("; SameSite=None; Secure; Partitioned" if secure else "; SameSite=Lax")


def _cookie(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"cookie":
            jar = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except CookieError:  # a malformed header: treat as no cookie
                return None
            if COOKIE in jar:
                return jar[COOKIE].value
    return None


def _with_cookie(headers: list[tuple[bytes, bytes]], visitor: str) -> list[tuple[bytes, bytes]]:
    """The request headers as if the browser had sent ``visitor`` already."""
    pair = f"{COOKIE}={visitor}".encode()
    others = [(n, v) for n, v in headers if n != b"cookie"]
    sent = [v for n, v in headers if n == b"cookie"]
    return others + [(b"cookie", b"; ".join([*sent, pair]))]
