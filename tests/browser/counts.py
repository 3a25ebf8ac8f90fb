"""Request counts as a viewer reads them: the header's "N pending · N waiting · N running", the
state badges of the request cards, and /metrics; and waiting until they settle, since the page
draws on its next frame and /metrics answers now."""
from __future__ import annotations

import re
import time
import urllib.request
from dataclasses import dataclass

STATES = ("pending", "waiting", "running")
BADGE_STATES = {"pending": "pending", "waiting": "waiting", "preempted": "waiting",
                "prefilling": "running", "decoding": "running", "finished": None}
SHOWN = """
  const line = document.querySelector('#bs-status .bs-status-counts');
  return {header: line ? line.textContent : null,
          badges: [...document.querySelectorAll('#bs-texts .bs-req .bs-state')].map((e) => e.textContent)};"""


@dataclass(frozen=True)
class Counts:
    pending: int | None
    waiting: int | None
    running: int | None


def header_counts(text: str | None) -> Counts | None:
    """The counts in the header's text ("0 pending/待提交 · 3 waiting/排队 · 1 running/运行")."""
    found = [re.search(rf"(\d+) {state}\b", text or "") for state in STATES]
    return Counts(*(int(m[1]) for m in found)) if all(found) else None


def card_counts(badges: list[str]) -> Counts:
    """The cards by the state their badge names ("decoding · 解码中", "prefilling 12/100 · ...")."""
    tally = dict.fromkeys(STATES, 0)
    for badge in badges:
        word = re.match(r"[a-z]+", badge)
        assert word and word[0] in BADGE_STATES, f"a card's badge names no state: {badge!r}"
        if state := BADGE_STATES[word[0]]:
            tally[state] += 1
    return Counts(**tally)


def metrics_counts(url: str) -> Counts:
    """/metrics' batchscope_requests_{pending,waiting,running} (None where it has none)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    found = [re.search(rf"^batchscope_requests_{state} (\S+)$", text, re.MULTILINE) for state in STATES]
    return Counts(*(int(float(m[1])) if m else None for m in found))


def shown_counts(driver, metrics_url: str | None = None) -> dict[str, Counts | None]:
    """What the header and the cards (drawn in the same frame) and /metrics say now."""
    shown = driver.execute_script(SHOWN)
    seen = {"header": header_counts(shown["header"]), "cards": card_counts(shown["badges"])}
    if metrics_url:
        seen["metrics"] = metrics_counts(metrics_url)
    return seen


def counts_when_settled(driver, moment: str, metrics_url: str | None = None, patience: float = 5) -> dict:
    """The counts everywhere once they agree, or as they stand after ``patience`` seconds of
    disagreeing."""
    deadline = time.monotonic() + patience
    while True:
        seen = {"moment": moment, **shown_counts(driver, metrics_url)}
        if not disagreements([seen]) or time.monotonic() > deadline:
            return seen
        time.sleep(0.2)


def disagreements(moments: list[dict]) -> list[dict]:
    return [m for m in moments if len({v for k, v in m.items() if k != "moment"}) > 1]
