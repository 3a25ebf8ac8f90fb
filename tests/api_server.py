"""A tiny-model engine and the OpenAI API on a loopback server, for the API tests' fixtures."""
from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI
from support.server import BackgroundServer

from engine import AsyncLLM
from serve import ApiLimits, install_api


def running_llm(model_dir: str, **config) -> Iterator[AsyncLLM]:
    llm = AsyncLLM(model_dir, **config)
    llm.wait_ready(120)
    yield llm
    llm.shutdown()


def api_url(llm: AsyncLLM, limits: ApiLimits) -> Iterator[str]:
    app = FastAPI()
    install_api(app, llm, limits)
    with BackgroundServer(app) as server:
        yield server.url
