"""The dashboard's solo-check route: a visitor checks their own finished request (fired from the
dashboard, sampled at temperature 0.7 with its own seed); anyone else gets a 404."""
import asyncio

import httpx
import pytest

from viz.live.identity import COOKIE, new_visitor_id
from viz.ui.firing import Knobs, plan_shot
from viz.ui.presets import load_presets

from support.viewers import dashboard, ws_messages

VISITOR = new_visitor_id()
ROUTE = "/batchscope/solo-check"


@pytest.fixture(scope="module")
def dashboard_server(tiny_model_dir):
    with dashboard(tiny_model_dir) as (server, app, llm):
        yield server, llm, app


def check(url: str, request_id: str, visitor: str | None) -> httpx.Response:
    cookies = {COOKIE: visitor} if visitor else None
    return httpx.post(f"{url}{ROUTE}", params={"request": request_id}, cookies=cookies, timeout=150)


def test_a_visitor_checks_their_own_finished_request_against_a_solo_run(dashboard_server):
    server, llm, app = dashboard_server
    owner = app.state.identity.owner({COOKIE: VISITOR})
    library = load_presets()
    planned = plan_shot(library, library.presets["article"], Knobs(3, 6, 0.7, 0), llm.tokenizer)
    ids = app.state.firing.fire(planned, owner)
    assert llm.wait_for(ids, {"finished"}, 120)
    assert check(server.url, ids[0], new_visitor_id()).status_code == 404
    assert check(server.url, ids[0], None).status_code == 404
    response = check(server.url, ids[0], VISITOR)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["request_id"] == ids[0] and report["alone"] and report["batch_invariant"] is False
    assert report["summary"].startswith("same as alone" if report["same"] else "first differs at token")
    snapshot = asyncio.run(ws_messages(server.url, bool, 10, VISITOR))[0]
    solo = next(e for e in snapshot["requests"] if e["request_id"] == report["solo_request_id"])
    assert solo["mine"] and solo["finished"]
    print(report)


def test_unknown_requests_are_404(dashboard_server):
    server, *_ = dashboard_server
    assert check(server.url, "nobody", VISITOR).status_code == 404
