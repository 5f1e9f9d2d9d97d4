"""A study with a parameter grid through Snakemake: one problem instance, its runs and rates per value."""

from __future__ import annotations

import pytest
from test_user_problem_cluster import MYMOD
from test_workflow import ok, read_csv, snakemake, write_config

from hbvm_workflow.reading import open_study
from hbvm_workflow.storage import open_errors, select_run
from hbvm_workflow.tables import COLUMNS, EXTRA

pytestmark = pytest.mark.slow

LENGTHS = [0.5, 1.0, 2.0]


def test_a_grid_study_has_a_column_rows_and_rates_per_value(tmp_path):
    (tmp_path / "mymod.py").write_text(MYMOD)
    study = {
        "problem": "mymod:pendulum",
        "grid": {"length": LENGTHS},
        "backend": "numpy",
        "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
        "t_end": 2,
        "h0": 0.1,
        "halvings": 2,
        "errors": {"reference": "self", "norm": "inf", "sample": 0.1},
    }
    write_config(tmp_path, {"sweep": study})
    ok(snakemake(tmp_path, "--cores", "2"))
    res = tmp_path / "results" / "sweep"
    with open(res / "errors.csv") as fh:
        assert fh.readline().strip().split(",") == [*COLUMNS, *EXTRA, "length"]
    rows = read_csv(res / "errors.csv")
    assert len(rows) == 2 * 3 * 3  # (method, h, length)
    assert sorted({(r["method"], r["h"], r["length"]) for r in rows}) == sorted(
        (m, repr(0.1 * 2.0**-n), repr(v)) for m in ("hbvm_k1_s1", "hbvm_k2_s2") for n in range(3) for v in LENGTHS
    )
    for method in ("hbvm_k1_s1", "hbvm_k2_s2"):
        for v in LENGTHS:
            block = [r for r in rows if r["method"] == method and r["length"] == repr(v)]
            assert [r["n"] for r in block] == ["0", "1", "2"] and block[0]["rate_s"] == ""
            assert abs(float(block[-1]["rate_s"]) - 2) < 0.3, block
    assert len({r["e_s"] for r in rows if r["n"] == "2"}) == 6  # the instances differ
    assert (res / "runs" / "hbvm_k2_s2" / "length=0.5" / "n=3.zarr.zip").is_file()  # the h/2 partner, per value

    ds = open_errors("sweep", results=str(tmp_path / "results"))
    assert ds.e_s.dims == ("scheme", "h", "length") and list(ds.length.values) == LENGTHS
    want = next(r for r in rows if r["method"] == "hbvm_k2_s2" and r["n"] == "1" and r["length"] == "2.0")
    assert ds.e_s.sel(scheme="hbvm_k2_s2", h=0.05, length=2.0).item() == float(want["e_s"])
    run = select_run(open_study("sweep", results=str(tmp_path / "results"))["hbvm_k2_s2/length=2.0"], h=0.05)
    assert run.attrs["problem_params"] == {"length": 2.0}
    table = (res / "table.md").read_text()
    assert "## HBVM(2,2), length=0.5" in table and "## HBVM(1,1), length=2.0" in table
    assert (res / "sweep.png").stat().st_size > 10_000

    again = ok(snakemake(tmp_path, "--cores", "2"))
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_sweep_study_is_opt_in_and_built_by_the_sweep_target(tmp_path):
    sweep = {
        "kind": "sweep",
        "problem": "planar_pendulum",
        "grid": {"theta_dot0": [1.0, 1.9]},  # save: summary (a sweep's default): the compiled ensemble loop
        "methods": [{"k": 2, "s": 2}],
        "t_end": 1,
        "h": [0.1, 0.05],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    }
    write_config(tmp_path, {"sw": sweep})
    ok(snakemake(tmp_path, "--cores", "2"))
    assert not (tmp_path / "results" / "sw").exists()  # not in the default target
    ok(snakemake(tmp_path, "--cores", "2", "sweep"))
    rows = read_csv(tmp_path / "results" / "sw" / "errors.csv")
    assert [(r["h"], r["theta_dot0"]) for r in rows] == [
        ("0.1", "1.0"),
        ("0.05", "1.0"),
        ("0.1", "1.9"),
        ("0.05", "1.9"),
    ]
    assert (tmp_path / "results" / "sw" / "sw.png").stat().st_size > 10_000


def test_a_grid_study_of_the_modified_pendulum_draws_a_curve_per_value(tmp_path):
    """The modified pendulum's initial velocity swept through Snakemake; the constraint panels of the stores it
    wrote have one curve per value, labelled with it."""
    import yaml

    from hbvm_workflow import plots
    from hbvm_workflow.loading import load_studies

    study = {
        "problem": "modified_pendulum",
        "grid": {"v0": [0.5, 1.0]},
        "params": {"gravity": 2.0},
        "backend": "numpy",
        "methods": [{"k": 6, "s": 2}],
        "t_end": 2,
        "h": [0.1],
        "errors": {"reference": "none", "hc_norm": 1},
        "plot": "constraint_panels",
    }
    config = write_config(tmp_path, {"mp": study})
    ok(snakemake(tmp_path, "--cores", "2"))
    res = tmp_path / "results" / "mp"
    assert (res / "mp.png").stat().st_size > 10_000
    assert sorted(p.name for p in (res / "runs" / "hbvm_k6_s2").iterdir()) == ["v0=0.5", "v0=1.0"]

    cfg = {**yaml.safe_load(config.read_text()), "results": str(tmp_path / "results")}
    (st,) = load_studies(cfg).values()
    fig = plots.constraint_panels_plot(st, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    assert len(fig.axes) == 3  # hidden constraint, H error, |g_1|
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines()] == [f"HBVM(6,2), h = 0.1, v0={v}" for v in (0.5, 1.0)]
