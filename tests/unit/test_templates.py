"""``templates.Template``: the sorted JSON of a record with values put in at marks is ``json.dumps`` of the record."""

from __future__ import annotations

import json

from hbvm_workflow.templates import Template, json_scalar, json_texts


def test_a_filled_template_is_the_dump_of_the_record_with_those_values():
    marks = ("\x00a\x00", "\x00b\x00", "\x00h\x00")
    record = {"z": {"b": marks[1], "text": '{braces} and "quotes" {0}'}, "a": marks[0], "h": marks[2], "n": [1, 2.5]}
    template = Template.of(record, marks)
    for a, b, h in [(0.1, 3, 1e-300), (-2.0, -7, 123456789.123), (1.0, 0, 5e-324)]:
        filled = {"z": {"b": b, "text": record["z"]["text"]}, "a": a, "h": h, "n": [1, 2.5]}
        assert template.fill(json_scalar(a), json_scalar(b), json_scalar(h)) == json.dumps(filled, sort_keys=True)


def test_a_mark_that_is_not_in_the_record_once_is_refused():
    assert Template.of({"a": "\x00m\x00", "b": "\x00m\x00"}, ("\x00m\x00",)) is None
    assert Template.of({"a": 1}, ("\x00m\x00",)) is None


def test_the_json_of_numbers_only():
    assert json_texts([0.1, 2.0, -0.0]) == [json.dumps(x) for x in (0.1, 2.0, -0.0)]
    assert json_texts([1, -3]) == ["1", "-3"]
    assert json_texts([1.0, float("inf"), True, "x", 2]) == ["1.0", None, None, None, "2"]
