"""Dashboard message protocol v2 over both transports (no engine: a hub fed by hand).

Identity is the ``bs_visitor`` cookie: the server sets it, derives the owner from it, and a
second connection with the same cookie (a reload) still reads that visitor's text."""
import asyncio
import json
import zlib
from functools import partial

import pytest
import websockets
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from test_viz_hub import arrival, delta, record

from viz.colors import PALETTE
from viz.live.hub import TelemetryHub
from viz.live.identity import COOKIE, VisitorCookies, VisitorIdentity, new_visitor_id

from support.viewers import SECRET, serve_hub, sse_messages, ws_messages

ALICE, BOB = new_visitor_id(), new_visitor_id()
TRANSPORTS = {"websocket": ws_messages, "websocket-text": partial(ws_messages, compress=None),
              "sse": sse_messages}


def has_text(rid: str, text: str):
    """Done once a frame carried ``text`` for ``rid``, or a snapshot listed it."""
    def done(messages):
        return any(e["request_id"] == rid and e["text"] == text
                   for m in messages for e in m.get("events", []) + m.get("requests", []))
    return done


def count(n: int):
    return lambda messages: len(messages) >= n


@pytest.fixture
def hub():
    hub = TelemetryHub()
    hub.set_meta_provider(lambda: {"palette": list(PALETTE)})
    return hub


def alices_request(hub: TelemetryHub) -> None:
    owner = VisitorIdentity(SECRET).owner({COOKIE: ALICE})
    hub.claim("a1", owner, "alice's question")
    hub.publish_event(arrival("a1", "alice's secret prompt"))
    hub.publish_record(record(0, "a1", token=99))
    hub.publish_event(delta("a1", "alice's answer"))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_cookie_decides_whose_text_a_viewer_reads(hub, transport):
    collect = TRANSPORTS[transport]
    with serve_hub(hub) as server:
        live = asyncio.run(collect(server.url, has_text("a1", "alice's answer"), 15, ALICE,
                                   action=lambda: alices_request(hub)))
        reload = asyncio.run(collect(server.url, count(1), 15, ALICE))  # a new page load
        stranger = asyncio.run(collect(server.url, count(1), 15, BOB))
        anonymous = asyncio.run(collect(server.url, count(1), 15, None))
    assert has_text("a1", "alice's answer")(live)
    [mine] = reload[0]["requests"]
    assert mine["mine"] and mine["visible"] and mine["prompt"] == "alice's secret prompt"
    for other in (stranger, anonymous):
        [entry] = other[0]["requests"]
        assert not entry["mine"] and not entry["visible"]
        assert entry["text"] == "" and entry["prompt"] is None and entry["label"] is None
        assert "alice" not in json.dumps(other)
        assert other[0]["records"][0]["sampled"] == {"a1": -1}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_snapshot_names_the_viewer_and_brings_meta_and_status(hub, transport):
    with serve_hub(hub) as server:
        first, second = (asyncio.run(TRANSPORTS[transport](server.url, count(3), 20, ALICE))
                         for _ in range(2))
    snapshot = first[0]
    assert snapshot["type"] == "snapshot" and snapshot["meta"] == {"palette": list(PALETTE)}
    assert snapshot["viewer"] and snapshot["viewer"] != second[0]["viewer"]
    assert ALICE not in json.dumps(first)  # the visitor id never comes back
    # with nothing happening, status frames keep coming (a silent stream is a dead one)
    assert [m["type"] for m in first[1:3]] == ["frame", "frame"]
    assert all(m["status"]["viewers"] >= 1 for m in first)


def cookie_app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(VisitorCookies)
    identity = VisitorIdentity(SECRET)

    @app.get("/")
    def page(request: Request) -> dict:
        return {"owner": identity.owner(request.cookies)}

    @app.get("/v1/models")
    def api(request: Request) -> dict:
        return {"owner": identity.owner(request.cookies)}

    return app


def test_pages_set_a_visitor_cookie_once_and_api_routes_none():
    client = TestClient(cookie_app())
    first = client.get("/")
    set_cookie = first.headers["set-cookie"]
    assert set_cookie.startswith(f"{COOKIE}=") and "HttpOnly" in set_cookie
    assert "SameSite=Lax" in set_cookie and "Path=/" in set_cookie
    visitor = client.cookies[COOKIE]
    assert len(visitor) == 32 and int(visitor, 16) >= 0  # 128 random bits
    # the very first request already has its owner, the same one the cookie gives later
    again = client.get("/")
    assert "set-cookie" not in again.headers
    assert first.json()["owner"] == again.json()["owner"] == \
        VisitorIdentity(SECRET).owner({COOKIE: visitor})
    assert "set-cookie" not in TestClient(cookie_app()).get("/v1/models").headers


def test_over_https_the_cookie_also_reaches_a_page_framed_by_another_site():
    """A Hugging Face Space shows the app (*.hf.space) in an iframe of huggingface.co: a
    SameSite=Lax cookie is not sent from a cross-site frame, so the visitor would lose their
    identity (and their own text) on every request. Over https the cookie is SameSite=None,
    Secure and Partitioned (CHIPS: kept per top-level site)."""
    client = TestClient(cookie_app(), base_url="https://space.example")
    set_cookie = client.get("/").headers["set-cookie"]
    assert "SameSite=None" in set_cookie and "Secure" in set_cookie and "Partitioned" in set_cookie
    assert "SameSite=Lax" not in set_cookie and "HttpOnly" in set_cookie


@pytest.mark.parametrize("forged", ["", "not-hex", "0" * 31, "x" * 32, ALICE.upper()])
def test_a_forged_or_malformed_cookie_is_replaced(forged):
    client = TestClient(cookie_app(), cookies={COOKIE: forged})
    response = client.get("/")
    assert response.headers["set-cookie"].startswith(f"{COOKIE}=")
    assert response.json()["owner"] is not None
    assert VisitorIdentity(SECRET).owner({COOKIE: forged}) is None


def test_owners_are_derived_under_the_server_secret():
    assert VisitorIdentity(b"one").owner({COOKIE: ALICE}) != \
        VisitorIdentity(b"two").owner({COOKIE: ALICE})
    assert ALICE not in VisitorIdentity(b"one").owner({COOKIE: ALICE})


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_viewer_that_leaves_is_unregistered(hub, transport):
    import time

    with serve_hub(hub) as server:
        asyncio.run(TRANSPORTS[transport](server.url, count(1), 15, ALICE))
        deadline = time.monotonic() + 10
        while hub.viewers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub.viewers == []


def test_a_page_asking_for_compression_gets_each_message_deflated_once_for_all():
    """The page asks for ``?compress=deflate-raw``: binary messages it inflates itself, and the
    server offers no permessage-deflate (that would compress every message once per viewer)."""
    async def first_messages(url: str, query: str) -> tuple[list, str | None]:
        async with websockets.connect(url.replace("http://", "ws://") + "/ws/telemetry" + query,
                                      max_size=None) as ws:  # the library offers permessage-deflate
            return [await ws.recv() for _ in range(2)], ws.response.headers.get("Sec-WebSocket-Extensions")

    with serve_hub(TelemetryHub()) as server:
        compressed, extensions = asyncio.run(first_messages(server.url, "?compress=deflate-raw"))
        plain, _ = asyncio.run(first_messages(server.url, ""))
    assert extensions is None
    assert all(isinstance(m, bytes) for m in compressed) and all(isinstance(m, str) for m in plain)
    texts = [json.loads(zlib.decompress(m, -zlib.MAX_WBITS)) for m in compressed]
    assert [m["type"] for m in texts] == [json.loads(m)["type"] for m in plain] == ["snapshot", "frame"]


def test_a_compression_the_server_does_not_offer_is_refused_with_its_reason():
    async def refused(url: str) -> websockets.ConnectionClosed:
        async with websockets.connect(url.replace("http://", "ws://") + "/ws/telemetry?compress=gzip") as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
        return closed.value

    with serve_hub(TelemetryHub()) as server:
        closed = asyncio.run(refused(server.url))
    assert closed.rcvd.code == 1008 and "'gzip'" in closed.rcvd.reason and "deflate-raw" in closed.rcvd.reason


def test_a_viewer_leaving_while_its_frame_is_sent_is_a_leave_not_an_error(caplog):
    """In a workshop viewers come and go; one gone mid-send ends its connection quietly (the
    server logged each as "sending failed" with two tracebacks: the soak's log filled with them)."""
    from starlette.websockets import WebSocketDisconnect

    from viz.live.transport import _serve_websocket

    class Leaving:
        closed: int | None = None

        async def send_bytes(self, data: bytes) -> None:
            raise WebSocketDisconnect(code=1006)

        async def receive(self) -> dict:
            await asyncio.Event().wait()

        async def close(self, code: int = 1000) -> None:
            self.closed = code

    hub, socket = TelemetryHub(), Leaving()

    async def serve() -> None:
        await _serve_websocket(socket, hub, hub.connect(None), True)
        await hub.stop()

    with caplog.at_level("WARNING", logger="viz.live.transport"):
        asyncio.run(asyncio.wait_for(serve(), 10))
    assert caplog.records == [] and socket.closed is None
