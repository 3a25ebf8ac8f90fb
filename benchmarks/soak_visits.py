"""The soak's visitors (benchmarks/soak.py): viewers who come and go, a tab that records a
trace, a Compare, a solo check, each through the routes the page itself uses."""
from __future__ import annotations

import asyncio
import json
import random
import time
import zlib
from dataclasses import dataclass, field

import httpx
import websockets

from benchmarks.room_load import gradio_answer, gradio_call
from benchmarks.room_summary import fired_ids
from viz.live.identity import COOKIE, new_visitor_id

STAY_S = (2.0, 8.0)  # how long a viewer reads before leaving
COMPARE_TIMEOUT_S = 600.0
SOLO_RETRY_S = 60.0


@dataclass
class Reconnects:
    """``count`` viewers, each connecting, reading a few seconds and leaving, over and over;
    half come back with the cookie they had, half as new visitors."""

    url: str
    count: int
    cookies: list[str]
    opened: int = 0
    errors: list[str] = field(default_factory=list)

    async def run(self) -> None:
        await asyncio.gather(*(self._viewer() for _ in range(self.count)))

    async def _viewer(self) -> None:
        while True:
            await self._visit(self._cookie())

    def _cookie(self) -> str:
        if self.cookies and random.random() < 0.5:
            return random.choice(self.cookies)
        self.cookies.append(new_visitor_id())
        return self.cookies[-1]

    async def _visit(self, cookie: str) -> None:
        url = self.url.replace("http://", "ws://") + "/ws/telemetry?compress=deflate-raw"
        try:
            async with websockets.connect(url, max_size=None, additional_headers={"Cookie": f"{COOKIE}={cookie}"},
                                          ping_interval=None, open_timeout=30) as ws:
                self.opened += 1
                await asyncio.wait_for(self._read(ws), random.uniform(*STAY_S))
        except TimeoutError:
            pass  # stayed as long as it meant to
        except (OSError, websockets.WebSocketException, ValueError) as exc:
            self.errors.append(f"viewer: {type(exc).__name__}: {exc}")
            await asyncio.sleep(1.0)

    @staticmethod
    async def _read(ws) -> None:
        async for raw in ws:
            json.loads(zlib.decompress(raw, -zlib.MAX_WBITS) if isinstance(raw, bytes) else raw)


@dataclass
class Visits:
    """The quiet part's activities and the recording tab; ``cookies``: every visitor so far."""

    url: str
    http: httpx.AsyncClient
    cookies: list[str] = field(default_factory=list)

    async def record(self, seconds: float, tally) -> None:
        """A tab records for ``seconds`` and downloads its trace."""
        tab = f"soak{random.randrange(1 << 30):x}"
        try:
            await gradio_call(self.http, "record", [True, ""], tab)
            await asyncio.sleep(seconds)
            outputs = await gradio_call(self.http, "record", [False, ""], tab)
            download = outputs[1]["value"]
            (await self.http.get(f"/gradio_api/file={download['path']}")).raise_for_status()
            tally.records += 1
        except (httpx.HTTPError, RuntimeError, KeyError, TypeError) as exc:
            tally.errors.append(f"record: {type(exc).__name__}: {exc}")

    async def compare(self) -> str:
        """The Compare's default pattern, two policies; waits for both sides."""
        inputs = ["article", "mixed", 512, "prefill_first", 512, 0, ""]
        try:
            await gradio_answer(self.http, "compare", inputs)
            deadline = time.monotonic() + COMPARE_TIMEOUT_S
            while (state := (await self.http.get("/compare/state")).json())["state"] == "running":
                if time.monotonic() > deadline:
                    return "still running after 600 s"
                await asyncio.sleep(1.0)
            result = await self.http.get("/compare/result")
            return f"{state['state']}, result {len(result.content) // 1024} KiB"
        except (httpx.HTTPError, RuntimeError) as exc:
            return f"failed: {type(exc).__name__}: {exc}"

    async def solo_check(self) -> str:
        """A new visitor fires one greedy request, then asks for its solo check."""
        cookie = new_visitor_id()
        self.cookies.append(cookie)
        async with httpx.AsyncClient(base_url=self.url, cookies={COOKIE: cookie}, timeout=180) as client:
            try:
                ids = fired_ids(await gradio_answer(client, "fire", ["chat", "", 1, 16, 0.0, 0, ""]))
                return await self._check(client, ids[0]) if ids else "not fired"
            except (httpx.HTTPError, RuntimeError) as exc:
                return f"failed: {type(exc).__name__}: {exc}"

    @staticmethod
    async def _check(client: httpx.AsyncClient, request_id: str) -> str:
        deadline = time.monotonic() + SOLO_RETRY_S
        while True:
            answer = await client.post("/batchscope/solo-check", params={"request": request_id})
            if answer.status_code != 409 or time.monotonic() > deadline:  # 409: still running
                break
            await asyncio.sleep(0.5)
        if answer.status_code != 200:
            return f"HTTP {answer.status_code}: {answer.text[:120]}"
        return "same as alone" if answer.json()["same"] else "differs alone"
