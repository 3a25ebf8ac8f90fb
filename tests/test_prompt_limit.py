"""One prompt-length limit and one message for the dashboard and the API: the API's
--api-max-prompt-tokens, checked by the engine facade's prepare on both paths."""
from __future__ import annotations

import re

import httpx

from viz.live.identity import COOKIE, new_visitor_id
from viz.ui.strings import unmarked

from support.viewers import dashboard

LIMIT = 64


def test_the_dashboard_refuses_what_the_api_refuses_with_the_same_message(tiny_model_dir):
    from gradio_client import Client

    prompt = "tell me more about batching " * 40  # ~200 tokens, over the limit
    flags = ("--api-max-prompt-tokens", str(LIMIT), "--max-model-len", "512")
    with dashboard(tiny_model_dir, *flags) as (server, _, _):
        api = httpx.post(f"{server.url}/v1/completions", timeout=60,
                         json={"model": "default", "prompt": prompt, "max_tokens": 4})
        client = Client(server.url, headers={"Cookie": f"{COOKIE}={new_visitor_id()}"},
                        verbose=False)
        fired = unmarked(client.predict("chat", prompt, 1, 4, 0.0, 0, api_name="/fire"))
        client.close()
    assert api.status_code == 400
    message = api.json()["error"]["message"]
    assert f"over this server's limit of {LIMIT} prompt tokens" in message
    reason = re.sub(r"^\S+: \d+ tokens", "", message)
    assert fired.startswith("Not fired: ") and reason in fired
