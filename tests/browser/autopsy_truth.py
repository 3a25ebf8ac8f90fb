"""The request autopsy as the page draws it (the lane figure, the TTFT table, the story) and as
the records say it should be, for the autopsy's browser tests."""
from __future__ import annotations

from chromium import debug, drawn, wait_for

LANE, ITL = "bs-autopsy-lane", "bs-autopsy-itl"
PARTS = ("queue", "prefill", "others", "preempted", "idle", "unknown")


def click_card(driver, rid: str) -> None:
    """Click the head of ``rid``'s text card, as a visitor would, once the page has drawn it: the
    page draws its cards on the animation frame after a message, so the state (``debug``) can hold
    a step whose cards are not in the document yet (a scrub's rebuild, seen under load in CI)."""
    wait_for(driver, lambda: driver.execute_script(
        "const card = [...document.querySelectorAll('#bs-texts .bs-req')].find(c => c.dataset.rid === arguments[0]);"
        "if (!card) return false; card.querySelector('.bs-req-head').click(); return true;", rid), f"{rid}'s card")


def mouse(driver, kind: str, x: float, y: float) -> None:
    driver.execute_cdp_cmd("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                        "clickCount": 1})


def click_segment(driver, view: str, rid: str, role: str = "rows") -> None:
    """Point at the middle of ``rid``'s bar in a view (the token layout's budget strip) and,
    once Plotly hovers it, click: a real mouse click, which Plotly reads from its drag layer.
    The view is scrolled into sight first, as a viewer would (a click on a card may have
    scrolled the page past it)."""
    driver.execute_script("document.getElementById(arguments[0]).scrollIntoView({block: 'center'})", view)
    figure = drawn(driver, "drawnFigure", view)
    trace = next(t for t in figure["traces"] if (t["meta"] or {}).get("rid") == rid
                 and t["meta"].get("role") == role and t["boxes"])
    box = trace["boxes"][0]
    x, y = (box["left"] + box["right"]) / 2, (box["top"] + box["bottom"]) / 2
    mouse(driver, "mouseMoved", x, y)
    wait_for(driver, lambda: driver.execute_script(
        "const h = document.getElementById(arguments[0])._hoverdata;"
        "return !!h && h.some(p => p.data.meta && p.data.meta.rid === arguments[1]);", view, rid), f"{rid} hovered")
    mouse(driver, "mousePressed", x, y)
    mouse(driver, "mouseReleased", x, y)


def wait_open(driver, rid: str) -> dict:
    """The autopsy of ``rid``, once open and its lane drawn."""
    wait_for(driver, lambda: (debug(driver)["autopsy"] or {}).get("open") == rid, f"the autopsy of {rid}")
    return wait_for(driver, lambda: (f := drawn(driver, "drawnFigure", LANE)) and
                    (f["layoutMeta"] or {}).get("rid") == rid and f, f"{rid}'s lane drawn")


def drawn_lane(figure: dict) -> tuple[dict[int, str], dict[int, int]]:
    """(step -> drawn state, step -> the request's own rows) of the lane figure."""
    states, rows = {}, {}
    for trace in figure["traces"]:
        meta = trace["meta"] or {}
        if meta.get("role") == "state":
            states.update({int(x): meta["state"] for x in trace["x"]})
        if meta.get("role") in ("own_prefill", "own_decode"):
            rows.update({int(x): int(y) for x, y in zip(trace["x"], trace["y"], strict=True)})
    return states, rows


def expected_lane(records: list[dict], rid: str) -> tuple[dict[int, str], dict[int, int]]:
    """What the records say the lane is: its state and its rows at every step it is in."""
    states, rows, lost, computed = {}, {}, 0, 0
    for record in records:
        info = record["requests"].get(rid)
        segment = next((s for s in record["segments"] if s["request_id"] == rid), None)
        if rid in record["preempted"]:
            lost = max(lost, computed)
        if segment:
            redo = segment["num_cached"] < lost
            lost = 0 if segment["num_keys"] >= lost else lost
            states[record["step"]] = "decode" if segment["kind"] == "decode" else "recompute" if redo else "prefill"
            rows[record["step"]] = segment["num_rows"]
        elif info or rid in record["preempted"]:
            status = "preempted" if rid in record["preempted"] else info["status"]
            states[record["step"]] = {"waiting": "waiting", "preempted": "preempted"}.get(status, "stalled")
        if info:
            computed = info["num_computed_tokens"]
    return states, rows


def ttft_shown(driver) -> dict:
    """The TTFT the panel shows: its total and each part, in ms as written on screen."""
    return driver.execute_script(
        "const p = document.querySelector('#bs-autopsy .bs-autopsy-ttft');"
        "return {total: Number(p.querySelector('h3').dataset.ms), head: p.querySelector('h3').textContent,"
        " parts: Object.fromEntries([...p.querySelectorAll('tr[data-part]')]"
        "   .map(r => [r.dataset.part, Number(r.dataset.ms)]))};")


def expected_ttft(records: list[dict], arrival: float, rid: str) -> dict:
    """TTFT (ms) from the arrival to the end of the step that sampled the first token, and the
    request's own share (by rows) of the steps up to it."""
    first = next(r for r in records if any(s["request_id"] == rid and s["sampled"] for s in r["segments"]))
    own = sum((r["t_end"] - r["t_start"]) * s["num_rows"] / r["num_rows"] for r in records
              if r["step"] <= first["step"] for s in r["segments"] if s["request_id"] == rid)
    return {"total": (first["t_end"] - arrival) * 1000, "own": own * 1000, "step": first["step"]}


def story(driver) -> list[tuple[str, str]]:
    """(key, text) of each line of the story."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#bs-autopsy .bs-autopsy-lines li')]"
        "  .map(l => [l.dataset.key, l.textContent]);")


def close(driver) -> None:
    driver.execute_script("document.querySelector('#bs-autopsy .bs-panel-close').click();")
    wait_for(driver, lambda: not (debug(driver)["autopsy"] or {}).get("open"), "the autopsy closed")


def assert_no_overflow(driver, panel: str) -> None:
    """No text of the panel runs past its box (nothing scrolls sideways, no cell overflows)."""
    cut = driver.execute_script(
        "const root = document.querySelector(arguments[0]), box = root.querySelector('.bs-panel-box');"
        "const out = [...root.querySelectorAll('h2, h3, h4, p, li, th, td, span, button')].filter(e =>"
        " e.offsetParent && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible')"
        ".map(e => e.textContent.slice(0, 60));"
        "if (box.scrollWidth > box.clientWidth + 1) out.push('the panel scrolls sideways');"
        "return out;", panel)
    assert cut == [], cut
