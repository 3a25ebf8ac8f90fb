"""What the views DRAW matches the step they show (truth.py), step by step through a replayed
trace; no label is cut or overlaps another at three screen sizes."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from chromium import ROOT, chromium, drawn, needs_chromium, viewport, wait_for
from playback import open_replay, show_iteration
from truth import (
    VIEWS,
    assert_page_text_whole,
    assert_texts_readable,
    check_attention,
    check_block_tables,
    check_layout_title,
    check_token_rows,
    layout_title,
    rows_drawn,
)

pytestmark = needs_chromium
STEPS = 12  # iterations of the shipped trace walked through
SIZES = [(1920, 1080), (1600, 900), (1366, 768)]
SAMPLED = [0, 3, 8, 30, 60, 100, 150, 200, 250, 280]  # across the trace: prefill, chunks, decodes


@pytest.fixture(scope="module")
def replay_page(replay_server):
    with chromium(1366, 768) as driver:
        open_replay(driver, replay_server)
        yield driver


def test_token_layout_rows_span_num_rows_on_the_budget_axis(replay_page, records):
    for i in range(STEPS):
        record = show_iteration(replay_page, records, i)
        figure, axes = rows_drawn(replay_page, record)
        check_token_rows(figure, axes, record)


def test_attention_segments_are_cu_seqlens_q_by_seq_lens_k(replay_page, records):
    for i in range(STEPS):
        record = show_iteration(replay_page, records, i)
        check_attention(drawn(replay_page, "drawnFigure", "bs-attention"), record)


def test_block_table_cells_are_the_records_block_ids(replay_page, records):
    for i in range(STEPS):
        record = show_iteration(replay_page, records, i)
        check_block_tables(drawn(replay_page, "drawnFigure", "bs-block-tables"), record)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_no_label_is_cut_or_overlaps_another(replay_page, records, size):
    viewport(replay_page, *size)
    try:
        for i in SAMPLED:
            show_iteration(replay_page, records, i)
            wait_for(replay_page, lambda: drawn(replay_page, "drawnToSize", VIEWS), "views sized to fit")
            assert_texts_readable(replay_page, f"{size[0]}x{size[1]}, iteration {i}")
            assert_page_text_whole(replay_page, f"{size[0]}x{size[1]}, iteration {i}")
    finally:
        viewport(replay_page, 1366, 768)


def test_the_token_layout_title_says_the_whole_sum(replay_page, records):
    replay_page.execute_script("window.batchscope.setLanguage('en')")
    try:
        for i in range(STEPS):
            record = show_iteration(replay_page, records, i)
            wait_for(replay_page, lambda r=record: (layout_title(replay_page) or "").startswith(f"step {r['step']}:"),
                     "the English title")
            check_layout_title(replay_page, record)
    finally:
        replay_page.execute_script("window.batchscope.setLanguage('both')")


def covered(char: str) -> bool:
    """Whether an installed font has a glyph for ``char`` (else Chromium draws an empty box)."""
    found = subprocess.run(["fc-list", f":charset={ord(char):x}", "family"], capture_output=True,
                           text=True, check=True)
    return bool(found.stdout.strip())


CHROME_TEXT = """
  const skip = new Set([...document.querySelectorAll('.bs-req-prompt, .bs-req-text')]);
  const parts = [];
  for (const id of ['bs-header-wrap', 'bs-views-wrap', 'bs-texts-wrap', 'bs-replay-wrap']) {
    const root = document.getElementById(id);
    if (!root) continue;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (![...skip].some((s) => s.contains(node))) parts.push(node.textContent);
    }
  }
  return parts.join('');"""


@pytest.mark.skipif(not shutil.which("fc-list"), reason="fontconfig's fc-list is not installed")
def test_every_glyph_on_the_page_and_in_the_strings_is_in_an_installed_font(replay_page, records):
    show_iteration(replay_page, records, 30)
    shown = replay_page.execute_script(CHROME_TEXT)
    table = json.loads((ROOT / "assets" / "strings.json").read_text(encoding="utf-8"))["views"]
    strings = "".join(entry[lang] for entry in table.values() for lang in ("en", "zh"))
    chars = sorted({c for c in shown + strings if not c.isspace()})
    assert len(chars) > 60 and any("\u4e00" <= c <= "\u9fff" for c in chars)
    assert [c for c in chars if not covered(c)] == []


def test_the_replay_says_replay_not_live(replay_page, records):
    show_iteration(replay_page, records, 1)
    tagline = replay_page.execute_script("return document.querySelector('#bs-header .bs-tagline').textContent")
    status = replay_page.execute_script("return document.getElementById('bs-status').textContent")
    assert "replay" in tagline and "live" not in tagline
    assert status.startswith("● replay") and "live" not in status


def test_a_zoom_survives_the_next_steps(replay_page, records):
    show_iteration(replay_page, records, 20)
    replay_page.execute_script(
        "Plotly.relayout(document.getElementById('bs-token-layout'), {'xaxis2.range': [5.5, 12.5]})")
    for i in (21, 22):
        show_iteration(replay_page, records, i)
        assert drawn(replay_page, "drawnFigure", "bs-token-layout")["axes"]["x2"]["range"] == [5.5, 12.5]


def test_chinese_only_views_speak_chinese(replay_page, records):
    replay_page.execute_script("window.batchscope.setLanguage('zh')")
    try:
        record = show_iteration(replay_page, records, 5)
        title = wait_for(replay_page, lambda: (t := layout_title(replay_page)) and t.startswith("第") and t,
                         "the Chinese title")
        assert title.startswith(f"第 {record['step']} 步:") and "rows" not in title
        texts = drawn(replay_page, "drawnTexts", "bs-timing")["texts"]
        assert not [t["text"] for t in texts if t["kind"] != "tick" and "step" in t["text"]]
    finally:
        replay_page.execute_script("window.batchscope.setLanguage('both')")
