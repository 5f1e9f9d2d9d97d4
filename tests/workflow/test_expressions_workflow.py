"""A problem given only in the YAML (expressions, no Python) through Snakemake, with a grid over a parameter."""

from __future__ import annotations

import pytest
from test_workflow import ok, read_csv, snakemake, write_config
from user_problems import PENDULUM_EXPRESSIONS

pytestmark = pytest.mark.slow

PROBLEM = PENDULUM_EXPRESSIONS
LENGTHS = [0.5, 2.0]


def test_a_yaml_only_problem_with_a_grid(tmp_path):
    study = {
        "problem": PROBLEM,
        "grid": {"length": LENGTHS},
        "backend": "numpy",
        "methods": [{"k": 2, "s": 2}],
        "t_end": 2,
        "h0": 0.1,
        "halvings": 2,
        "errors": {"reference": "self", "norm": "inf", "sample": 0.1},
    }
    write_config(tmp_path, {"yaml_only": study})
    ok(snakemake(tmp_path, "--cores", "2"))
    rows = read_csv(tmp_path / "results" / "yaml_only" / "errors.csv")
    assert len(rows) == 3 * 2 and {r["problem"] for r in rows} == {"pendulum"}
    for v in LENGTHS:
        block = [r for r in rows if r["length"] == repr(v)]
        assert [r["n"] for r in block] == ["0", "1", "2"]
        assert abs(float(block[-1]["rate_s"]) - 2) < 0.3, block  # the constant multiplier: order 2 (docs/method.md)
        assert float(block[-1]["e_g"]) < 1e-13  # g quadratic, k = s: conserved to round-off
    assert len({r["e_s"] for r in rows}) == 6  # the two lengths are two problems
    again = ok(snakemake(tmp_path, "--cores", "2"))
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_bad_expression_fails_before_any_job_with_one_line(tmp_path):
    study = {
        "problem": {**PROBLEM, "potential": "grav*y + __import__('os').getpid()"},
        "methods": [{"k": 2, "s": 2}],
        "t_end": 1,
        "h": [0.1],
        "errors": {"reference": "self"},
    }
    write_config(tmp_path, {"bad": study})
    proc = snakemake(tmp_path, "--cores", "1")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if line.startswith("bad config: ")]
    assert len(lines) == 1 and "studies.bad.problem.potential" in lines[0] and "'__import__'" in lines[0], out[-3000:]
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.zarr.zip"))
