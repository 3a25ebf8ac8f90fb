"""The article's preset on a paused engine stepped one step at a time: the step after C's
arrival is the one the README describes, number for number, as read from the README itself
(A 500 cached + 1, B 200 cached + 1 and C 100 new = 102 rows, cu_seqlens_q and seq_lens_k), and
as the preset's own text on the page says; the Max tokens slider holds for all three."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from viz.live.hub import TelemetryHub
from viz.ui.firing import Firing, Knobs, plan_shot
from viz.ui.presets import load_presets
from viz.ui.submit import LocalSubmitter

MAX_TOKENS = 5
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class DescribedStep:
    """The article's step as a text describes it."""

    segments: list[tuple[str, str, int, int]]  # (request, phase, new tokens, tokens cached)
    num_rows: int
    cu_seqlens_q: list[int]
    seq_lens_k: list[int]
    prompts: dict[str, int]  # request -> prompt tokens


def numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text)]


def the_one(found: list, what: str):
    """The value every mention in the text gives (the README says some numbers twice)."""
    assert found and all(f == found[0] for f in found), f"{what}: {found}"
    return found[0]


def lists_named(name: str, text: str) -> list[list[int]]:
    """Every ``name = [...]`` in ``text`` (a list may wrap onto the next line)."""
    return [numbers(m) for m in re.findall(rf"{name} = \[([\d,\s]+)\]", text)]


def readme_step() -> DescribedStep:
    """What the README's "What you are looking at" and "The dashboard" sections say."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| ([A-Z]) \| (decode|prefill) \| (\d+) \| (\d+) \|$", text, re.MULTILINE)
    keys = lists_named("seq_lens_k", text) + [numbers(m) for m in re.findall(r"key\s+lengths ([\d,\s]+\d)", text)]
    prompts = {**{m[0]: int(m[1]) for m in re.findall(r"\b([A-Z]) \(a (\d+)-token prompt\)", text)},
               **{m[0]: int(m[1]) for m in re.findall(r"\b([A-Z]) \((\d+) tokens\)", text)}}
    return DescribedStep(
        segments=[(rid, phase, int(rows), int(cached)) for rid, phase, rows, cached in table],
        num_rows=the_one([int(n) for n in re.findall(r"-> (\d+) rows", text)], "rows"),
        cu_seqlens_q=the_one(lists_named("cu_seqlens_q", text), "cu_seqlens_q"),
        seq_lens_k=the_one(keys, "key lengths"), prompts=prompts)


def wait_until(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def stepped(tiny_model_dir):
    from engine import AsyncLLM

    llm = AsyncLLM(tiny_model_dir, num_kv_blocks=256)  # the default budget, 512
    llm.wait_ready(120)
    hub = TelemetryHub()
    hub.attach(llm)
    records = []
    llm.subscribe(records.append)
    firing = Firing(LocalSubmitter(llm), hub)
    library = load_presets()
    llm.pause()
    planned = plan_shot(library, library.presets["article"], Knobs(3, MAX_TOKENS, 0.7, 0),
                        llm.tokenizer)
    firing.fire(planned, owner=None)
    try:
        for still_pending in (2, 1, 0):  # A at once, B once A decodes, C once both do
            wait_until(lambda left=still_pending: firing.pending() <= left)
            stepped_before = len(records)
            llm.step_once()
            wait_until(lambda before=stepped_before: len(records) > before)
        llm.resume()
        wait_until(lambda: _all_finished(records, planned))
    finally:
        llm.shutdown()
    return planned, records


@pytest.fixture(scope="module")
def slow_motion(tiny_model_dir):
    """The same shot on a running engine in slow motion (1500 ms per step), as a presenter runs it."""
    from engine import AsyncLLM

    llm = AsyncLLM(tiny_model_dir, num_kv_blocks=256)
    llm.wait_ready(120)
    hub = TelemetryHub()
    hub.attach(llm)
    records = []
    llm.subscribe(records.append)
    llm.set_min_step_interval(1.5)
    library = load_presets()
    planned = plan_shot(library, library.presets["article"], Knobs(3, MAX_TOKENS, 0.7, 0), llm.tokenizer)
    Firing(LocalSubmitter(llm), hub).fire(planned, owner=None)
    try:
        wait_until(lambda: _all_finished(records, planned), timeout=90)
    finally:
        llm.shutdown()
    return planned, records


def test_in_slow_motion_the_step_after_cs_arrival_is_the_readmes_too(slow_motion):
    planned, records = slow_motion
    assert run_step(records, planned) == readme_step()


def _all_finished(records, planned) -> bool:
    done = {rid for r in records for rid in r["finished"]}
    return {p.request_id for p in planned} <= done


def run_step(records: list[dict], planned) -> DescribedStep:
    """The step after C's arrival (the first that schedules C), as the run's record has it."""
    labels = {p.request_id: p.request_id.rstrip("0123456789") for p in planned}
    step = next(r for r in records if any(labels[s["request_id"]] == "C" for s in r["segments"]))
    segments = step["segments"]
    return DescribedStep(
        segments=[(labels[s["request_id"]], "decode" if s["kind"] == "decode" else "prefill",
                   s["num_rows"], s["num_cached"]) for s in segments],
        num_rows=step["num_rows"], cu_seqlens_q=step["cu_seqlens_q"], seq_lens_k=step["seq_lens_k"],
        prompts={labels[s["request_id"]]: s["num_prompt_tokens"] for s in segments})


def test_the_step_after_cs_arrival_is_the_one_the_readme_describes(stepped):
    planned, records = stepped
    described = readme_step()
    assert [rid for rid, *_ in described.segments] == ["A", "B", "C"]  # the README was read
    assert set(described.prompts) == {"A", "B", "C"}
    assert run_step(records, planned) == described


def test_the_presets_text_on_the_page_gives_the_readmes_numbers():
    from viz.ui.presets import load_presets

    described = readme_step()
    text = load_presets().presets["article"].description
    assert the_one(lists_named("cu_seqlens_q", text), "cu_seqlens_q") == described.cu_seqlens_q
    assert the_one(lists_named("seq_lens_k", text), "seq_lens_k") == described.seq_lens_k
    terms = " + ".join(str(rows) for *_, rows, _cached in described.segments)
    assert f"{terms} = {described.num_rows}" in text


def test_max_tokens_holds_for_every_request(stepped):
    planned, records = stepped
    generated = {p.request_id: 0 for p in planned}
    for record in records:
        for rid in record["sampled"]:
            if rid in generated:
                generated[rid] += 1
    assert generated == {p.request_id: MAX_TOKENS for p in planned}
