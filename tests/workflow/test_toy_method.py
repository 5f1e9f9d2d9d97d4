"""A method added from a module outside the package (tests/toy_methods.py: explicit Euler, one module and one
registry line) runs in a study through real Snakemake, named by the config's ``method_modules``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_workflow import ok, read_csv, snakemake, write_config

pytestmark = pytest.mark.slow

TOY = Path(__file__).resolve().parents[1] / "toy_methods.py"


def test_a_method_registered_by_a_module_of_the_config_runs_through_snakemake(tmp_path):
    shutil.copy(TOY, tmp_path / "toy_methods.py")  # importable from the working directory, as a user's module
    study = {
        "problem": "planar_pendulum",
        "methods": [{"method": "euler"}],
        "t_end": 1,
        "h0": 0.02,
        "halvings": 2,
        "errors": {"reference": "exact", "norm": "inf", "sample": "all"},
    }
    write_config(tmp_path, {"toy": study}, method_modules=["toy_methods"])
    ok(snakemake(tmp_path, "--cores", "2"))
    rows = read_csv(tmp_path / "results" / "toy" / "errors.csv")
    assert [(r["method"], r["n"]) for r in rows] == [("euler", "0"), ("euler", "1"), ("euler", "2")]
    rates = [float(r["rate_s"]) for r in rows[1:]]
    assert all(abs(r - 1) < 0.1 for r in rates), rates  # explicit Euler is first order (toy_methods.orders)
    assert "## Euler" in (tmp_path / "results" / "toy" / "table.md").read_text()

    write_config(tmp_path, {"toy": study})  # without the module the method is unknown: one line, before any job
    proc = snakemake(tmp_path, "--cores", "2")
    assert proc.returncode != 0
    assert "method = 'euler': unknown method" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
