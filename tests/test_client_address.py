"""Per-client API limits count real clients: X-Forwarded-For is believed only when the socket
peer is a trusted proxy (uvicorn's ``forwarded_allow_ips``), else the peer's address counts."""
from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

import app as dashboard
from serve import ApiLimits, install_api
from serve.proxies import uvicorn_proxy_options
from support.server import BackgroundServer

from api_server import running_llm

TIMEOUT = httpx.Timeout(30.0)
BODY = {"prompt": "hi", "max_tokens": 2, "stream": True}


def statuses_of_concurrent_streams(url: str, llm, headers: list[dict]) -> list[int]:
    """Open one stream per header set while the engine is paused (all stay in flight)."""
    llm.pause()
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        responses = [client.send(client.build_request("POST", "/v1/completions", json=BODY, headers=h),
                                 stream=True) for h in headers]
        llm.resume()
        for response in responses:
            response.read()
            response.close()
    return sorted(response.status_code for response in responses)


def distinct_forwarded_for(n: int) -> list[dict]:
    return [{"X-Forwarded-For": f"198.51.100.{i}"} for i in range(n)]


def test_forwarded_for_from_an_untrusted_peer_is_ignored(tiny_model_dir, monkeypatch):
    """The server as ``app.py`` runs it: a client on the socket cannot pose as twelve."""
    started = {}
    create_app = dashboard.create_app

    def create(args):
        started["app"], started["llm"], hub = create_app(args)
        return started["app"], started["llm"], hub

    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.setattr(dashboard, "create_app", create)
    monkeypatch.setattr(dashboard.uvicorn, "run", lambda app, **options: started.update(options=options))
    dashboard.main(["--model", tiny_model_dir, "--num-kv-blocks", "64", "--max-model-len", "256"])
    proxy = {k: v for k, v in started["options"].items() if k in ("proxy_headers", "forwarded_allow_ips")}
    with BackgroundServer(started["app"], **proxy) as server:
        started["llm"].wait_ready(120)
        statuses = statuses_of_concurrent_streams(server.url, started["llm"], distinct_forwarded_for(12))
    assert statuses == [200] * 4 + [429] * 8


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    yield from running_llm(tiny_model_dir, num_kv_blocks=64, max_model_len=256)


def test_behind_a_trusted_proxy_the_forwarded_client_counts(llm, monkeypatch):
    """As on a Space: the proxy (here loopback, a private address) is trusted; the client is the
    address it appended, whatever a client wrote to the left of it."""
    monkeypatch.setenv("SPACE_ID", "someone/batchscope")
    args = dashboard.common_arguments().parse_args([])
    app = FastAPI()
    install_api(app, llm, ApiLimits())
    with BackgroundServer(app, **uvicorn_proxy_options(args.forwarded_allow_ips)) as server:
        distinct = statuses_of_concurrent_streams(server.url, llm, distinct_forwarded_for(12))
        forged = [{"X-Forwarded-For": f"203.0.113.{i}, 198.51.100.7"} for i in range(12)]
        one_client = statuses_of_concurrent_streams(server.url, llm, forged)
    assert distinct == [200] * 12
    assert one_client == [200] * 4 + [429] * 8


def test_no_proxy_is_trusted_unless_configured(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert dashboard.common_arguments().parse_args([]).forwarded_allow_ips is None
    assert uvicorn_proxy_options(None) == {"proxy_headers": False}
    args = dashboard.common_arguments().parse_args(["--forwarded-allow-ips", "10.0.0.5"])
    assert uvicorn_proxy_options(args.forwarded_allow_ips) == {
        "proxy_headers": True, "forwarded_allow_ips": "10.0.0.5"}
