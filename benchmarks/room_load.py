"""The room benchmark's load: visitors clicking Fire, and API streams keeping the engine busy.

Firers click the page's own Fire button through Gradio's HTTP API (``POST
/gradio_api/call/fire``, then the event stream of its answer), each with a ``bs_visitor`` cookie
of its own, so every click goes through the same handler, fair share and hub as a browser's.
Each firer clicks at a steady rate (one click every ``every_s``, the firers' phases spread over
that period); a click's answer names the requests it fired, or says why none was (a visitor's
cap of requests in flight). API streams are plain ``/v1/completions`` streams, one after the
other on each of K tasks (the API has no ``ignore_eos``: a stream that ends early on EOS is just
followed by the next one).
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from dataclasses import dataclass, field

import httpx

from benchmarks.room_summary import Click, fired_ids
from viz.live.identity import COOKIE, new_visitor_id

API_PROMPT = "Write a long story about a lighthouse keeper who collects clocks"
FIRE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class FireSetting:
    preset: str = "chat"
    count: int = 2
    max_tokens: int = 32
    temperature: float = 0.7
    spacing_ms: int = 0
    every_s: float = 10.0

    def inputs(self) -> list:
        """The Fire listener's inputs (viz/ui/page.py ``_wire``): preset, typed prompt, count,
        max tokens, temperature, spacing, presenter key."""
        return [self.preset, "", self.count, self.max_tokens, self.temperature, self.spacing_ms, ""]


async def gradio_call(client: httpx.AsyncClient, api_name: str, data: list,
                      session_hash: str | None = None) -> list:
    """Call a Gradio endpoint by its api_name and return its outputs (``session_hash``: the
    tab it comes from, for listeners that keep per-tab state)."""
    body = {"data": data} if session_hash is None else {"data": data, "session_hash": session_hash}
    posted = await client.post(f"/gradio_api/call/{api_name}", json=body)
    posted.raise_for_status()
    event_id = posted.json()["event_id"]
    event = ""
    async with client.stream("GET", f"/gradio_api/call/{api_name}/{event_id}") as stream:
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: ") and event in ("complete", "error"):
                data = json.loads(line[len("data: "):])
                if event == "error":
                    raise RuntimeError(f"gradio error: {data}")
                return data
    raise RuntimeError("gradio's event stream ended without an answer")


async def gradio_answer(client: httpx.AsyncClient, api_name: str, data: list) -> str:
    """A Gradio endpoint's first output (str)."""
    return (await gradio_call(client, api_name, data))[0]


@dataclass
class Firers:
    url: str
    setting: FireSetting
    count: int
    clicks: list[Click] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    async def run(self) -> None:
        """Until cancelled."""
        await asyncio.gather(*(self._fire(i) for i in range(self.count)))

    async def _fire(self, firer: int) -> None:
        every = self.setting.every_s
        cookies = {COOKIE: new_visitor_id()}
        async with httpx.AsyncClient(base_url=self.url, cookies=cookies, timeout=FIRE_TIMEOUT_S) as client:
            start = time.monotonic() + every * firer / max(self.count, 1)
            tick = 0
            while True:
                await asyncio.sleep(max(0.0, start + tick * every - time.monotonic()))
                await self._click(client, firer)
                tick = max(tick + 1, int((time.monotonic() - start) / every) + 1)  # skip missed ticks

    async def _click(self, client: httpx.AsyncClient, firer: int) -> None:
        t_click = time.time()
        try:
            answer = await gradio_answer(client, "fire", self.setting.inputs())
        except (httpx.HTTPError, RuntimeError, ValueError) as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        ids = fired_ids(answer)
        self.clicks.append(Click(firer, t_click, ids[0] if ids else None, None if ids else answer))


@dataclass
class ApiStreams:
    url: str
    count: int
    max_tokens: int = 64
    completed: int = 0
    chunks: int = 0
    errors: list[str] = field(default_factory=list)

    async def run(self) -> None:
        """Until cancelled."""
        limits = httpx.Limits(max_connections=self.count + 4)
        async with httpx.AsyncClient(base_url=self.url, timeout=300, limits=limits) as client:
            await asyncio.gather(*(self._stream(client, i) for i in range(self.count)))

    async def _stream(self, client: httpx.AsyncClient, index: int) -> None:
        for n in itertools.count():
            body = {"model": "default", "prompt": f"{API_PROMPT} ({index}.{n}).", "stream": True,
                    "max_tokens": self.max_tokens, "temperature": 0.8, "ignore_eos": True}
            try:
                async with client.stream("POST", "/v1/completions", json=body) as response:
                    response.raise_for_status()
                    async for line in response.aiter_lines():
                        self.chunks += line.startswith("data: ") and line != "data: [DONE]"
                self.completed += 1
            except httpx.HTTPError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(1.0)


async def cancel(*tasks: asyncio.Task) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
