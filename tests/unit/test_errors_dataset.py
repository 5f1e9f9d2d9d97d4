"""errors.zarr as xarray users query it, and rates at the round-off floor: in-process, numpy backend."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from hbvm_core.metrics import at_roundoff
from hbvm_workflow.storage import open_errors
from hbvm_workflow.study import expand_study
from hbvm_workflow.tables import aggregate
from hbvm_workflow.worker import solve_job


def _solved(tmp_path, name, cfg):
    study = expand_study(name, {"backend": "numpy", **cfg}, results=str(tmp_path / "results"))
    for job in study.jobs.values():
        assert solve_job(job)["status"] == "ok"
    out = {k: str(tmp_path / "results" / name / f) for k, f in (("z", "errors.zarr"), ("c", "errors.csv"))}
    md, tex = tmp_path / "results" / name / "table.md", tmp_path / "results" / name / "table.tex"
    aggregate(study, out["z"], out["c"], str(md), str(tex))
    with open(out["c"]) as fh:
        return list(csv.DictReader(fh)), md.read_text()


def test_at_roundoff():
    # both errors at most 1000 eps (2.2e-13) times the scale
    assert at_roundoff(1e-15, 6e-14) and not at_roundoff(1e-15, 1e-12) and not at_roundoff(math.nan, 1e-16)
    assert at_roundoff(1e-12, 1e-12, scale=10.0) and not at_roundoff(1e-13, 1e-13, scale=0.1)


@pytest.fixture(scope="module")
def planar(tmp_path_factory):
    cfg = {
        "problem": "planar_pendulum",
        "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
        "t_end": 0.5,
        "h": [0.1, 0.05],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    }
    tmp = tmp_path_factory.mktemp("planar")
    rows, _ = _solved(tmp, "p", cfg)
    return rows, open_errors("p", results=str(tmp / "results"))


def test_sel_scheme_selects_one_method(planar):
    rows, err = planar
    assert err.e_s.dims == ("scheme", "h") and list(err.scheme.values) == ["hbvm_k1_s1", "hbvm_k2_s2"]
    one = err.e_s.sel(scheme="hbvm_k2_s2")
    assert one.dims == ("h",) and one.sel(h=0.05).item() == float(rows[3]["e_s"])
    by_ks = err.set_index(scheme=["k", "s"]).e_s.sel(k=2, s=2)
    assert by_ks.sel(h=0.05).item() == float(rows[3]["e_s"])
    assert err.sel(scheme="hbvm_k1_s1").name.item() == "HBVM(1,1)"


def test_loaded_with_cf_attributes(planar):
    _, err = planar
    assert not any(hasattr(v.data, "dask") for v in err.variables.values())
    for name in list(err.data_vars) + ["scheme", "h", "k", "s", "n", "name"]:
        attrs = err[name].attrs
        assert attrs.get("long_name") and attrs.get("units") in ("1", "s"), name
    assert err.wall_s.attrs["units"] == "s" and "time unit" in err.h.attrs["description"]


def test_round_off_pairs_get_no_rate(tmp_path):
    """Conical pendulum (table 2's conventions), 2 h: e_lambda and e_hc sit at round-off, e_s does not."""
    cfg = {
        "problem": "conical_pendulum",
        "methods": [{"k": 2, "s": 2}],
        "periods": 1,
        "period_divisions": [10, 20],
        "errors": {"reference": "exact", "norm": "inf", "sample": "periods", "lambda_sample": "all"},
    }
    rows, md = _solved(tmp_path, "c", cfg)
    assert rows[1]["rate_s"] != "" and abs(float(rows[1]["rate_s"]) - 4) < 0.2
    assert float(rows[1]["e_lambda"]) < 1e-13 and rows[1]["rate_lambda"] == "" and rows[1]["rate_hc"] == ""
    assert "roundoff_lambda" not in rows[1]  # errors.csv keeps its columns
    err = open_errors("c", results=str(tmp_path / "results"))
    assert err.roundoff_lambda.values.tolist() == [[False, True]] and err.roundoff_hc.values.tolist() == [[False, True]]
    assert err.roundoff_s.values.tolist() == [[False, False]] and np.isnan(err.rate_lambda.values[0, 1])
    assert "| 20 | " in md and md.count("round-off") == 2


@pytest.mark.parametrize(
    "cfg",
    [
        {  # table 2's conventions: rates at the round-off floor ("round-off" in the tables)
            "problem": "conical_pendulum",
            "methods": [{"k": 2, "s": 2}],
            "periods": 1,
            "period_divisions": [10, 20],
            "errors": {"reference": "exact", "norm": "inf", "sample": "periods", "lambda_sample": "all"},
        },
        {  # a grid: a block per combination; a failed run (nan_later: the bob rises above y = -0.9 at t ~ 0.45)
            "problem": "bad_problems:nan_later",
            "grid": {"y_max": [-0.9, 0.0]},
            "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
            "t_end": 0.5,
            "h": [0.1, 0.05],
            "errors": {"reference": "self", "norm": 1, "sample": 0.1},
        },
    ],
    ids=["round-off", "grid-and-failure"],
)
def test_tables_from_the_written_numbers_are_the_computed_ones(tmp_path, cfg):
    """Rule render lays the tables out from errors.csv and errors.zarr (rows_from_outputs): the same text as from the
    rows computed from the runs, so a title change need not recompute them."""
    from hbvm_workflow.tables import compute_errors, html_table, latex_table, markdown_table, rows_from_outputs

    study = expand_study("t", {"backend": "numpy", **cfg}, results=str(tmp_path / "results"))
    for job in study.jobs.values():
        solve_job(job)
    d = tmp_path / "results" / "t"
    rows = compute_errors(study, str(d / "errors.zarr"), str(d / "errors.csv"))
    back = rows_from_outputs(study, str(d / "errors.csv"), str(d / "errors.zarr"))
    assert len(back) == len(rows) >= 2
    for layout in (markdown_table, latex_table, html_table):
        assert layout(study, back) == layout(study, rows)
    if "grid" in cfg:
        assert {r["status"] for r in rows} >= {"ok", "failed"}
    else:
        assert markdown_table(study, back).count("round-off") == 2


def test_each_constraints_error_with_its_index(tmp_path):
    """Tethered satellites (nu = 3): e_g_constraint over (scheme, h, constraint), the constraint's index 0, 1, 2
    as coordinate, each the maximum over the run of |g_i| as the store recorded g while the run went (the
    sink's column, not the aggregation's recomputation); e_g (errors.csv) is their maximum."""
    from hbvm_workflow.storage import read_arrays

    cfg = {
        "problem": "tethered_satellites",
        "methods": [{"k": 2, "s": 2}],
        "t_end": 0.2,
        "h": [0.1, 0.05],
        "errors": {"reference": "none", "hc_norm": 1},
    }
    rows, _ = _solved(tmp_path, "t", cfg)
    err = open_errors("t", results=str(tmp_path / "results"))
    each = err.e_g_constraint.sel(scheme="hbvm_k2_s2")
    assert each.dims == ("h", "constraint") and err.constraint.values.tolist() == [0, 1, 2]
    study = expand_study("t", {"backend": "numpy", **cfg}, results=str(tmp_path / "results"))
    for job in study.jobs.values():
        (g, q) = read_arrays(job.store, ("g", "q"))
        tol = 8 * np.finfo(float).eps * float(np.max(q**2))  # g is |q_i - q_j|^2 - 1: rounding of a size |q|^2
        np.testing.assert_allclose(each.sel(h=job.h).values, np.max(np.abs(g), axis=0), rtol=0, atol=tol)
    assert [float(r["e_g"]) for r in rows] == each.max("constraint").values.tolist()
