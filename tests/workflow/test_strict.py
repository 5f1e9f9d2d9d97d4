"""A study with a failed run: exit 0 by default, exit 1 with ``--config strict=true`` or a study's ``strict: true``;
in every case the last line of the output counts the failed runs (hbvm_workflow.outcome).

One tiny study through the real Snakefile: HBVM(1,1) on the planar pendulum at h = 5 (diverges at step 0, as
tests/workflow/test_reliability_failures.py shows) and h = 0.5 (converges); a second study without failures.
"""

from __future__ import annotations

import pytest
import yaml
from _reliability import csv_dicts, snakemake, write_config

pytestmark = pytest.mark.slow

FAILING = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}],
    "t_end": 5,
    "h": [5.0, 0.5],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}
FINE = FAILING | {"h": [0.5, 0.25]}
FAILED_LINE = "failed runs: 1 (bad: hbvm_k1_s1/h=5.0)"


def last_line(proc) -> str:
    return proc.stdout.strip().splitlines()[-1]


def test_a_failed_run_is_counted_on_the_last_line_and_strict_makes_it_an_error(tmp_path):
    write_config(tmp_path, {"bad": FAILING, "fine": FINE})
    run = snakemake(tmp_path, "--cores", "1")
    assert run.returncode == 0, run.stdout[-3000:]
    assert last_line(run) == f"{FAILED_LINE}, reported in errors.csv (strict=true makes them an error)"
    assert [r["status"] for r in csv_dicts(tmp_path / "results" / "bad" / "errors.csv")] == ["failed", "ok"]
    strict = snakemake(tmp_path, "--cores", "1", "--config", "strict=true")  # nothing to do: still an error
    assert strict.returncode == 1 and "Traceback" not in strict.stdout, strict.stdout[-3000:]
    assert last_line(strict) == f"{FAILED_LINE}; strict: exit status 1"
    assert (tmp_path / "results" / "bad" / "errors.csv").is_file()  # the outputs kept

    # a study's own key: only its failures count as errors
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    cfg["studies"]["fine"]["strict"] = True
    write_config(tmp_path, cfg["studies"])
    only_fine = snakemake(tmp_path, "--cores", "1")
    assert only_fine.returncode == 0 and last_line(only_fine).startswith(FAILED_LINE + ", reported")
    cfg["studies"]["bad"]["strict"] = True
    write_config(tmp_path, cfg["studies"])
    study_key = snakemake(tmp_path, "--cores", "1")
    assert study_key.returncode == 1 and last_line(study_key) == f"{FAILED_LINE}; strict: exit status 1"
    fine_only = snakemake(tmp_path, "--cores", "1", "--config", "strict=true", "select=[fine]")
    assert fine_only.returncode == 0 and last_line(fine_only) == "failed runs: 0", fine_only.stdout[-2000:]


def test_a_sweeps_diverging_runs_are_counted_named_and_explained_on_the_last_line(tmp_path):
    """A save: summary sweep whose h = 5 runs do not converge (as above: HBVM(1,1) fails at step 0), one per grid
    value and shard: exit 0, no traceback, and the last line names the two runs, why, and counts them."""
    sweep = FAILING | {"kind": "sweep", "grid": {"theta_dot0": [1.0, 1.9]}, "shard_runs": 2}
    del sweep["backend"]
    write_config(tmp_path, {"sw": sweep}, select=["sw"])
    run = snakemake(tmp_path, "--cores", "2")
    assert run.returncode == 0 and "Traceback" not in run.stdout, run.stdout[-3000:]
    named = "hbvm_k1_s1/theta_dot0=1.0/h=5.0, hbvm_k1_s1/theta_dot0=1.9/h=5.0"
    line = f"failed runs: 2 (sw: {named} [2 x no convergence])"
    assert last_line(run) == f"{line}, reported in errors.csv (strict=true makes them an error)"
    strict = snakemake(tmp_path, "--cores", "1", "--config", "strict=true")  # nothing to do: still counted
    assert strict.returncode == 1 and "Traceback" not in strict.stdout, strict.stdout[-3000:]
    assert last_line(strict) == f"{line}; strict: exit status 1"
