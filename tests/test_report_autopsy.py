"""The exported report carries the live page's autopsy modules (one implementation) as an
import map of data: URLs, and the records and arrivals they read."""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from viz.traces.export import to_html_report
from viz.traces.report_client import PREFIX, json_script, module_map
from viz.traces.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "assets" / "traces").glob("*.jsonl*"))


def source(url: str) -> str:
    return base64.b64decode(url.removeprefix("data:text/javascript;base64,")).decode("utf-8")


def test_the_module_map_holds_what_report_js_imports_with_bare_names():
    urls = module_map("report.js")
    names = {name.removeprefix(PREFIX) for name in urls}
    assert {"report.js", "autopsy_panel.js", "autopsy.js", "lanes.js", "strings.js", "figures/common.js",
            "text_fit.js", "panel.js"} <= names
    assert "main.js" not in names and "transport.js" not in names  # only what it needs
    for name, url in urls.items():
        imports = re.findall(r'\b(?:from|import)\s*"([^"]+)"', source(url))
        assert all(i.startswith(PREFIX) and i in urls for i in imports), (name, imports)
    common = source(urls[PREFIX + "figures/common.js"])
    assert f'from "{PREFIX}text_fit.js"' in common  # "../text_fit.js" resolved from figures/


def test_json_in_a_script_element_cannot_end_it():
    html = json_script("x", {"text": "</script><script>alert(1)</script>"})
    body = html.removeprefix('<script type="application/json" id="x">').removesuffix("</script>")
    assert "<" not in body and json.loads(body)["text"] == "</script><script>alert(1)</script>"


def test_the_report_opens_the_autopsy_from_every_request_id():
    trace = load_trace(SHIPPED[0])
    page = to_html_report(trace)
    ids = re.findall(r'data-autopsy="([^"]+)"', page)
    arrivals = [e["request_id"] for e in trace.events if e["kind"] == "arrival"]
    assert ids == arrivals
    assert '<script type="importmap">' in page and 'from "batchscope/js/report.js"' in page
    data = json.loads(re.search(r'id="bs-report-data">(.*?)</script>', page, re.S)[1])
    assert [r["step"] for r in data["records"]] == [r["step"] for r in trace.records]
    assert all(r["kv"].get("ref_counts") is None for r in data["records"])
    assert "autopsy.title" in data["strings"] and len(data["meta"]["palette"]) == 12
