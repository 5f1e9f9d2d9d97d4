"""What reruns, through real Snakemake (docs/workflow.md, "What reruns"): each study's outputs depend on its own entry.

- a change of a study's title re-renders its tables and figure (rule render) without recomputing its errors (rule
  aggregate): errors.csv is the same file, the table shows the new title, the other study is untouched;
- a change of a key that defines numbers (errors.norm) recomputes that study's errors, not the other's, and no run;
- choosing other studies with `select:` and then the default again reruns nothing that is up to date;
- a bead on a parabola with G of the wrong sign stops the workflow before any job, with one line.

Two tiny studies (two runs each, numpy backend), built once for the module.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _reliability import snakemake, write_config

pytestmark = pytest.mark.slow

STUDY = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}],
    "t_end": 0.5,
    "h": [0.1, 0.05],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}
SOLVE = ("solve.json",)
AGGREGATE = ("errors.csv", "timings.csv", "errors.zarr/zarr.json")
RENDER = ("table.md", "table.tex", "table.html", "{study}.png", "{study}.pdf")


def ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout + proc.stderr


def outputs(workdir: Path) -> dict[tuple[str, str], int]:
    """(study, step) -> the modification times of the step's outputs: which steps a run redid, whatever Snakemake
    prints."""
    out = {}
    for study in "ab":
        d = workdir / "results" / study
        for step, names in (("solve", SOLVE), ("aggregate", AGGREGATE), ("render", RENDER)):
            paths = [d / n.format(study=study) for n in names]
            out[study, step] = tuple(p.stat().st_mtime_ns for p in paths if p.exists())
    return out


def redone(before: dict, after: dict) -> list[tuple[str, str]]:
    return sorted(key for key in before if before[key] != after[key])


def edit(workdir: Path, study: str, **keys) -> None:
    path = workdir / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["studies"][study].update(keys)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("reruns")
    write_config(workdir, {"a": dict(STUDY, title="Study A"), "b": dict(STUDY, h=[0.1, 0.025])})
    ok(snakemake(workdir, "--cores", "2"))
    assert all(outputs(workdir).values())
    return workdir


def test_a_title_change_rerenders_without_recomputing_errors(built):
    before = outputs(built)
    aggregated = (built / "logs" / "a" / "aggregate.log").read_text().count("aggregated")
    edit(built, "a", title="A new title")
    assert "Nothing to be done" not in ok(snakemake(built, "--cores", "2", "-n"))
    ok(snakemake(built, "--cores", "2"))
    assert redone(before, outputs(built)) == [("a", "render")]  # errors.csv, errors.zarr: the same files
    assert (built / "results" / "a" / "table.md").read_text().startswith("# A new title\n")
    assert "A new title" in (built / "results" / "a" / "table.html").read_text()
    assert (built / "logs" / "a" / "aggregate.log").read_text().count("aggregated") == aggregated
    assert "Nothing to be done" in ok(snakemake(built, "--cores", "2", "-n"))


def test_a_change_of_numbers_recomputes_that_study_only(built):
    before = outputs(built)
    csv = (built / "results" / "a" / "errors.csv").read_text()
    edit(built, "a", errors={"reference": "exact", "norm": "inf", "sample": "all"})
    ok(snakemake(built, "--cores", "2"))
    assert redone(before, outputs(built)) == [("a", "aggregate"), ("a", "render")]  # no run recomputed
    assert (built / "results" / "a" / "errors.csv").read_text() != csv  # the max norm, not the 1-norm


def test_select_and_back_reruns_nothing_up_to_date(built):
    before = outputs(built)
    for select in ("select=[a]", None):
        args = ("--config", select) if select else ()
        assert "Nothing to be done" in ok(snakemake(built, "--cores", "2", *args, "-n")), select
        ok(snakemake(built, "--cores", "2", *args))
    assert redone(before, outputs(built)) == []


def test_wrong_sign_of_G_stops_the_workflow_with_one_line(tmp_path):
    write_config(tmp_path, {"p": dict(STUDY, problem="bad_problems:bead_on_parabola", errors={"reference": "none"})})
    proc = snakemake(tmp_path, "--cores", "2")
    assert proc.returncode != 0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("bad config: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
    assert lines[0].startswith(
        "bad config: studies.p.problem = 'bad_problems:bead_on_parabola': bead_on_parabola: callback G does not "
        "match the central differences of g at q0 (q = [0.5, 0.25]): relative discrepancy 2.00e+00"
    ), lines[0]
    assert not (tmp_path / "results").exists()
