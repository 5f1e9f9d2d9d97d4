"""A run whose nonlinear iteration diverges or stalls, or whose callback turns NaN, is a failed row.

One real ``snakemake --cores 2`` builds two studies:

- ``div``: the planar pendulum on [0, 10] with HBVM(2,2) at h = 2.5, 0.1, 0.05
  (h = 2.5 stalls: no convergence at step 2, t = 5, last increment ~5e-7) and
  HBVM(1,1) at h = 5, 0.1, 0.05 (h = 5 diverges at step 0, increment ~2.7);
- ``nonfinite``: a user problem whose grad_U turns NaN once the bob rises above
  y = -0.8 (every run reaches it near t = 0.7).

The workflow must finish (exit 0); each failing run leaves no store but a
failure marker with the step, time and last increment that the core reports
for the same run in-process; its rows say "failed" in every table, with empty
fields -- never "nan" -- where the numbers would be; the rate of the next row is
not taken across the failed one; the other rows are numbers; a rerun does not
recompute the (deterministic) failures.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import xarray as xr
from _reliability import csv_dicts, snakemake, write_config

import hbvm_core as hc
from hbvm_core.errors import ConvergenceError, NonFiniteError
from hbvm_core.methods import method_from_entry

pytestmark = pytest.mark.slow

DIV = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}, {"k": 1, "s": 1, "h": [5.0, 0.1, 0.05]}],
    "t_end": 10,
    "h": [0.05, 2.5, 0.1],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}
NAN = {
    "problem": "bad_problems:nan_later",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}],
    "t_end": 2,
    "h": [0.1, 0.05],
    "errors": {"reference": "none"},
}
NUMBERS = ("e_s", "rate_s", "e_lambda", "rate_lambda", "e_H", "e_g", "e_hc", "rate_hc", "mean_iterations")


def core_failure(problem, k: int, s: int, h: float, t_end: float) -> Exception:
    """The exception the core raises for the same run in-process."""
    try:
        hc.integrate(problem, method_from_entry({"k": k, "s": s}), h, t_end, backend="numpy")
    except (ConvergenceError, NonFiniteError) as exc:
        return exc
    raise AssertionError(f"HBVM({k},{s}) h = {h} did not fail")


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("failures")
    write_config(workdir, {"div": DIV, "nonfinite": NAN})
    proc = snakemake(workdir, "--cores", "2")
    assert proc.returncode == 0, proc.stdout[-5000:]
    return workdir


def test_diverging_and_stalling_runs_are_failed_rows(solved):
    res = solved / "results" / "div"
    rows = csv_dicts(res / "errors.csv")
    assert [(r["method"], r["h"], r["status"]) for r in rows] == [
        ("hbvm_k2_s2", "2.5", "failed"),
        ("hbvm_k2_s2", "0.1", "ok"),
        ("hbvm_k2_s2", "0.05", "ok"),
        ("hbvm_k1_s1", "5.0", "failed"),
        ("hbvm_k1_s1", "0.1", "ok"),
        ("hbvm_k1_s1", "0.05", "ok"),
    ]
    planar = hc.get_problem("planar_pendulum")
    for (k, s, h), row in zip([(2, 2, 2.5), (1, 1, 5.0)], (rows[0], rows[3])):
        exc = core_failure(planar, k, s, h, 10)
        # the failure marker holds what the core reports: step, time, last increment
        marker = json.loads((res / "runs" / row["method"] / f"h={h!r}.zarr.zip.failed.json").read_text())
        assert marker["failed"] is True and marker["complete"] is False
        err = marker["error"]
        assert err["type"] == "ConvergenceError"
        assert (err["step"], err["t"], err["increment"], err["iterations"]) == (
            exc.step,
            exc.t,
            exc.increment,
            exc.iterations,
        )
        assert not (res / "runs" / row["method"] / f"h={h!r}.zarr.zip").exists()  # no store, complete or not
        # the row: failed, the reason, and no number where the errors would be
        assert row["error"].startswith(f"step {exc.step} (t = {exc.t:.6g}): ")
        assert f"last increment {exc.increment:.3e}" in row["error"]
        assert all(row[c] == "" for c in NUMBERS), row
        assert row["steps"] == str(round(10 / h))

    for i in (1, 2, 4, 5):  # the others are numbers; rates only between two finished rows
        assert all(math.isfinite(float(rows[i][c])) for c in ("e_s", "e_lambda", "e_H", "e_g", "e_hc"))
    assert rows[1]["rate_s"] == rows[4]["rate_s"] == ""  # not taken across the failed row above
    for i in (2, 5):
        assert abs(float(rows[i]["rate_s"]) - 2) < 0.2 and abs(float(rows[i]["rate_lambda"]) - 1) < 0.2

    # timings.csv: the same runs in the same order; a failed run's wall time is its time to the failure
    assert "wall_s" not in (res / "errors.csv").read_text().splitlines()[0].split(",")
    timings = csv_dicts(res / "timings.csv")
    assert [(t["method"], t["h"], t["steps"], t["status"]) for t in timings] == [
        (r["method"], r["h"], r["steps"], r["status"]) for r in rows
    ]
    assert all(float(t["wall_s"]) > 0 and t["worker"].startswith("tls://127.0.0.1:") for t in timings)
    assert [t["backend"] for t in timings] == ["", "numpy", "numpy", "", "numpy", "numpy"]

    md = (res / "table.md").read_text()
    assert "| 2.5 | failed | — |" in md and "| 5 | failed | — |" in md
    assert "Failures:" in md and f"h = 2.5: failed: {rows[0]['error']}" in md
    for name in ("errors.csv", "timings.csv", "table.md", "table.tex", "table.html"):
        assert "nan" not in (res / name).read_text().lower(), name
    ds = xr.open_zarr(res / "errors.zarr")
    # flags over (scheme, h = 5, 2.5, 0.1, 0.05): 1 failed (NaN e_s there), 0 ok, -1 not run
    assert ds.h.values.tolist() == [5.0, 2.5, 0.1, 0.05]
    assert ds.status.values.tolist() == [[-1, 1, 0, 0], [1, -1, 0, 0]]
    manifest = json.loads((res / "solve.json").read_text())
    assert sorted(manifest["failed"]) == ["hbvm_k1_s1/h=5.0", "hbvm_k2_s2/h=2.5"]
    assert (res / "div.png").stat().st_size > 10_000


def test_a_callback_turning_nan_mid_run_is_a_failed_row(solved):
    res = solved / "results" / "nonfinite"
    rows = csv_dicts(res / "errors.csv")
    assert [(r["h"], r["status"]) for r in rows] == [("0.1", "failed"), ("0.05", "failed")]
    import bad_problems

    for row in rows:
        h = float(row["h"])
        exc = core_failure(bad_problems.nan_later(), 2, 2, h, 2)
        assert isinstance(exc, NonFiniteError) and "callback grad_U returned non-finite values at step" in str(exc)
        marker = json.loads((res / "runs" / "hbvm_k2_s2" / f"h={h!r}.zarr.zip.failed.json").read_text())
        assert marker["error"]["type"] == "NonFiniteError" and marker["error"]["message"] == str(exc)
        assert row["error"] == str(exc) and all(row[c] == "" for c in NUMBERS)
    # the bob crosses y = -0.8 at t ~ 0.699: in step 6, on [0.6, 0.7] (docs/method.md counts steps from 0)
    assert "at step 6 (t = 0.6)" in rows[0]["error"]
    md = (res / "table.md").read_text()
    assert md.count("| failed |") == 2 and not re.search(r"\bnan\b", md.lower())
    assert not list((res / "runs").glob("*/h=*.zarr.zip"))  # no store at a final path


def test_a_rerun_keeps_the_failures_without_recomputing(solved):
    proc = snakemake(solved, "--cores", "2")
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout, proc.stdout[-3000:]
