"""JSON texts of many records that differ only in a few scalar values, written from one template.

A sweep plans 10^5 to 10^6 runs whose hash inputs (``runs.Job.hash_input``) and problem params differ in the grid
values, the step size and the problem's fingerprint: ``Template`` dumps one record as sorted JSON with marks in
place of those values, once, and ``fill`` puts each record's values in (a finite float's or an int's JSON is its
repr), the same text as ``json.dumps(record, sort_keys=True)``.
"""

from __future__ import annotations

import json
import math
from typing import Any


def json_scalar(x: Any) -> str | None:
    """The JSON of a number as ``json.dumps`` writes it (``float.__repr__``, ``int.__repr__``), or None for anything
    else (a bool, a non-finite float, a string, a list: not filled into a template)."""
    if isinstance(x, float):
        return float.__repr__(x) if math.isfinite(x) else None
    if isinstance(x, int) and not isinstance(x, bool):
        return int.__repr__(x)
    return None


def json_texts(values: list) -> list[str | None]:
    """``json_scalar`` of each value (a grid key's 10^5 values: as one map where they are all floats or all ints)."""
    kinds = set(map(type, values))
    if kinds == {float} and all(map(math.isfinite, values)):
        return list(map(float.__repr__, values))
    if kinds == {int}:
        return list(map(int.__repr__, values))
    return [json_scalar(v) for v in values]


class Template:
    """``json.dumps(record, sort_keys=True, default=repr)`` of records like ``record``, in which the values at
    ``marks`` (strings put in the record in their place) differ: ``fill(*texts)`` with each mark's JSON text in the
    order of ``marks`` (``of``: None where a mark is not in the dump exactly once)."""

    def __init__(self, form: str):
        self._format = form

    @classmethod
    def of(cls, record: dict, marks: tuple[str, ...]) -> Template | None:
        text = json.dumps(record, sort_keys=True, default=repr)
        found = []
        for i, mark in enumerate(marks):
            quoted = json.dumps(mark)
            if text.count(quoted) != 1:
                return None
            found.append((text.index(quoted), len(quoted), i))
        pieces, at = [], 0
        for start, size, i in sorted(found):
            pieces.append(text[at:start].replace("{", "{{").replace("}", "}}") + f"{{{i}}}")
            at = start + size
        return cls("".join(pieces) + text[at:].replace("{", "{{").replace("}", "}}"))

    def fill(self, *texts: str) -> str:
        """The record's JSON with ``texts`` in place of the marks."""
        return self._format.format(*texts)
