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
    assert list(failed) == ["a"] and failed["a"].runs == ["m/n=0", "m/n=1", "m/n=2", "m/n=3"]
    config = {"studies": {"a": {}, "b": {"strict": True}}}
    assert strict_studies(config, ["a", "b"]) == {"b"}
    assert strict_studies(config | {"strict": "true"}, ["a", "b"]) == {"a", "b"}  # --config strict=true: a string
    assert strict_studies(config | {"strict": "false"}, ["a"]) == set()
    named = "failed runs: 4 (a: m/n=0, m/n=1, m/n=2, ...)"
    assert last_line(failed, {"b"}) == f"{named}, reported in errors.csv (strict=true makes them an error)"
    assert last_line(failed, {"a"}) == f"{named}; strict: exit status 1"
    assert last_line({}, {"a"}) == "failed runs: 0"


def test_a_summary_studys_count_is_reported_with_its_first_runs_and_their_reasons(tmp_path):
    """A ``save: summary`` manifest counts its failed runs ("failed": 12), names the first and counts the reasons;
    one written before the names were recorded has the count alone. Neither raises."""
    results = str(tmp_path)
    first = [f"m/x={i}/h=5.0" for i in range(10)]
    manifests = {
        "sweep": {
            "save": "summary",
            "failed": 12,
            "failed_runs": first,
            "failed_reasons": {"diverged": 2, "no convergence": 10},
        },
        "older": {"save": "summary", "failed": 3},
        "clean": {"save": "summary", "failed": 0},
        "runs": {"failed": ["m/n=0"], "jobs": []},
    }
    for name, m in manifests.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "solve.json").write_text(json.dumps(m))
    failed = failed_runs(results, list(manifests))
    assert sorted(failed) == ["older", "runs", "sweep"]
    assert (failed["sweep"].count, failed["older"].count, failed["runs"].count) == (12, 3, 1)
    # 12 + 3 + 1 = 16; the reasons most frequent first
    line = (
        "failed runs: 16 (sweep: m/x=0/h=5.0, m/x=1/h=5.0, m/x=2/h=5.0, ... [10 x no convergence, 2 x diverged]; "
        "older: 3; runs: m/n=0)"
    )
    assert last_line(failed, set()) == f"{line}, reported in errors.csv (strict=true makes them an error)"
    assert last_line(failed, {"older"}) == f"{line}; strict: exit status 1"
