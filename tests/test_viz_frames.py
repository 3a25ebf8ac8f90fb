"""Message text: valid JSON for any members, records completed per audience."""
import json

from viz.frames import RecordBody, json_array, json_object


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
