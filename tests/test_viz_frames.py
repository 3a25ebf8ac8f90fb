"""Message text: valid JSON for any members, records completed per audience."""
import json
from dataclasses import dataclass

import pytest

from viz.live.frames import RecordBody, json_array, json_object


def test_objects_are_valid_json_for_empty_and_raw_members():
    assert json.loads(json_object({})) == {}
    assert json.loads(json_object({}, records="[]")) == {"records": []}
    assert json.loads(json_object({"a": 1}, b='{"c": 2}')) == {"a": 1, "b": {"c": 2}}


def test_a_record_body_is_completed_with_each_audiences_sampled_map():
    record = {"step": 3, "segments": [], "sampled": {"q1": 42}}
    body = RecordBody.of(record)
    assert json.loads(body.with_sampled({"q1": -1})) == {"step": 3, "segments": [],
                                                         "sampled": {"q1": -1}}
    assert json.loads(RecordBody.of({}).with_sampled({})) == {"sampled": {}}
    assert json.loads(json_array([body.with_sampled({}), RecordBody.of({}).with_sampled({})])) \
        == [{"step": 3, "segments": [], "sampled": {}}, {"sampled": {}}]


def test_nested_dataclasses_become_objects_and_text_orjson_refuses_still_serialises():
    @dataclass(slots=True)
    class Part:
        name: str
        rows: tuple[int, ...]

    record = {"step": 1, "segments": [Part("r1", (0, 3))], "blocks": {7: "r1"}, "sampled": {}}
    assert json.loads(RecordBody.of(record).with_sampled({})) == {
        "step": 1, "segments": [{"name": "r1", "rows": [0, 3]}], "blocks": {"7": "r1"}, "sampled": {}}
    label = {"label": "x\ud800y"}  # a lone surrogate, as a page's JSON may carry in a label
    assert json.loads(json_object(label)) == label


def test_what_json_cannot_hold_is_refused_with_its_type_named():
    with pytest.raises(TypeError, match="object"):
        RecordBody.of({"step": object()})
