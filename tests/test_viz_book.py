"""The RequestBook's delta offsets, in the unit the page slices its strings by (UTF-16 code
units): tests/data/text_deltas.json is read here and folded by tests/js/state.test.js."""
import json
from pathlib import Path

from viz.live.book import RequestBook

DELTAS = json.loads((Path(__file__).parent / "data" / "text_deltas.json").read_text())


def test_delta_offsets_count_utf16_units_past_the_basic_plane():
    book = RequestBook()
    sent = [book.apply({k: v for k, v in e.items() if not k.endswith("offset")}) for e in DELTAS["events"]]
    assert [(e["offset"], e["token_offset"]) for e in sent] == [
        (e["offset"], e["token_offset"]) for e in DELTAS["events"]]
    [entry] = book.entries()
    assert entry.text == DELTAS["text"]
