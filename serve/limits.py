"""Limits that keep a public server alive, and the admission control that enforces them.

Clients are told apart by ``request.client.host``: the socket peer, or behind a trusted proxy
the address it forwarded (``proxies.py``).
"""
from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field, fields

from .errors import ApiError


def _limit(default: int, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ApiLimits:
    max_prompt_tokens: int = _limit(1024, "longest prompt, in tokens")
    max_tokens: int = _limit(256, "largest max_tokens a request may ask for (the chat default)")
    max_concurrent_per_client: int = _limit(4, "requests in flight per client IP")
    max_waiting: int = _limit(32, "accepted requests without a first token yet, all clients")
    max_body_bytes: int = _limit(256 * 1024, "largest request body")
    retry_after_s: int = _limit(2, "Retry-After sent with 429 and 503")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ApiLimits.{f.name} must be a positive integer, got {value!r}")


class Ticket:
    """One admitted request's claim on its client's slots and on the waiting queue."""

    def __init__(self, admission: Admission, client: str):
        self._admission = admission
        self._client = client
        self._waiting = True
        self._released = False

    def started(self) -> None:
        """The request produced output: it no longer counts as waiting."""
        if self._waiting:
            self._waiting = False
            self._admission.waiting -= 1

    def release(self) -> None:
        if self._released:
            return
        self.started()
        self._released = True
        self._admission.release_client(self._client)


class Admission:
    """Counts in-flight API requests; used from the event loop only, so it needs no lock."""

    def __init__(self, limits: ApiLimits):
        self.limits = limits
        self.waiting = 0
        self._per_client: Counter[str] = Counter()

    def admit(self, client: str) -> Ticket:
        limits = self.limits
        if self._per_client[client] >= limits.max_concurrent_per_client:
            raise self._too_many(f"this client already has {limits.max_concurrent_per_client} requests "
                                 "in flight, the most this server allows; retry when one finishes")
        if self.waiting >= limits.max_waiting:
            raise self._too_many(f"the server's queue is full ({limits.max_waiting} requests waiting); "
                                 "retry shortly")
        self._per_client[client] += 1
        self.waiting += 1
        return Ticket(self, client)

    def release_client(self, client: str) -> None:
        self._per_client[client] -= 1
        if self._per_client[client] <= 0:
            del self._per_client[client]

    def _too_many(self, message: str) -> ApiError:
        return ApiError(429, message, type="rate_limit_error", code="rate_limit_exceeded",
                        headers={"Retry-After": str(self.limits.retry_after_s)})


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """``--api-*`` flags for every ``ApiLimits`` field, in their own --help group."""
    group = parser.add_argument_group("OpenAI API limits")
    for f in fields(ApiLimits):
        flag = "--api-" + f.name.replace("_", "-")
        group.add_argument(flag, dest=f"api_{f.name}", type=int, default=f.default, metavar="N",
                           help=f"{f.metadata['help']} (default: %(default)s)")


def limits_from_arguments(args: argparse.Namespace) -> ApiLimits:
    return ApiLimits(**{f.name: getattr(args, f"api_{f.name}") for f in fields(ApiLimits)})
