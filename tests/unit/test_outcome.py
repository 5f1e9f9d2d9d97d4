"""The last line of a run and strict (hbvm_workflow.outcome), from manifests written by hand
(tests/workflow/test_strict.py runs them through Snakemake)."""

from __future__ import annotations

import json

from hbvm_workflow.layout import manifest_path
from hbvm_workflow.outcome import failed_runs, last_line, strict_studies


def test_failed_runs_are_counted_and_strict_is_the_configs_or_a_studys(tmp_path):
    results = str(tmp_path)
    for name, failed in (("a", ["m/n=0", "m/n=1", "m/n=2", "m/n=3"]), ("b", [])):
        path = tmp_path / name / "solve.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"failed": failed, "jobs": []}))
        assert str(path) == manifest_path(results, name)
    failed = failed_runs(results, ["a", "b", "unsolved"])
    assert failed == {"a": ["m/n=0", "m/n=1", "m/n=2", "m/n=3"]}
    config = {"studies": {"a": {}, "b": {"strict": True}}}
    assert strict_studies(config, ["a", "b"]) == {"b"}
    assert strict_studies(config | {"strict": "true"}, ["a", "b"]) == {"a", "b"}  # --config strict=true: a string
    assert strict_studies(config | {"strict": "false"}, ["a"]) == set()
    named = "failed runs: 4 (a: m/n=0, m/n=1, m/n=2, ...)"
    assert last_line(failed, {"b"}) == f"{named}, reported in errors.csv (strict=true makes them an error)"
    assert last_line(failed, {"a"}) == f"{named}; strict: exit status 1"
    assert last_line({}, {"a"}) == "failed runs: 0"
