"""A study that flattens at the reference floor, through the package's own path (the runs solved by
``worker.solve_job``, aggregated by ``tables.compute_errors``, rendered from errors.csv and errors.zarr as rule render
does): the conical pendulum's ODE reference at the loose ``reference_rtol: 1e-6`` (its closed form set aside), so
HBVM(2,2)'s e_s falls as h^4 (its published order 2s) until it meets the reference's own error and stops there. The
tables say "reference floor" there, never "round-off" (the errors are 10^7 times above 1000 eps), and the figure
shades the band below the reference's accuracy.

No loop is compiled (``backend: numpy``): seconds each."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from hbvm_workflow import layout, plots  # noqa: E402
from hbvm_workflow.loading import load_studies  # noqa: E402
from hbvm_workflow.plot_dispatch import study_plot  # noqa: E402
from hbvm_workflow.storage import open_errors_at  # noqa: E402
from hbvm_workflow.tables import compute_errors, rows_from_outputs, write_tables  # noqa: E402
from hbvm_workflow.worker import solve_job  # noqa: E402

#: h = T/n: e_s = C h^4 falls 16x per halving while above the reference's error (about 4e-6 at rtol 1e-6, measured
#: against rtol 2.5e-14), then stays at it
LOOSE = {
    "problem": "conical_pendulum",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}],
    "periods": 1,
    "period_divisions": [5, 10, 20, 40, 80, 160],
    "expected_rates": {"e_s": "2s"},  # the sweep figure's C = e_s / h^4
    "errors": {
        "reference": "reference",
        "reference_kind": "ode",
        "reference_rtol": 1e-6,
        "norm": "inf",
        "sample": "all",
    },
}
BAND = "reference floor (DOP853 at rtol 1e-06, estimated)"


def _through_the_package(tmp_path, name: str, entry: dict):
    """The study solved, aggregated and rendered; (study, rows read back, table.md, the figure's dataset)."""
    results = str(tmp_path / "results")
    (study,) = load_studies({"studies": {name: entry}, "results": results}).values()
    for job in study.jobs.values():
        assert solve_job(job)["status"] == "ok"
    out = layout.aggregate_outputs(results, name)
    compute_errors(study, out["zarr"], out["csv"], out["timings"])
    rows = rows_from_outputs(study, out["csv"], out["zarr"])
    md, tex, html = (layout.table_path(results, name, ext) for ext in ("md", "tex", "html"))
    write_tables(study, rows, md, tex, html)
    png, pdf = layout.figure_path(results, name, "png"), layout.figure_path(results, name, "pdf")
    study_plot(study, out["zarr"], png, pdf)
    assert (tmp_path / "results" / name / f"{name}.png").stat().st_size > 10_000
    return study, rows, open(md).read(), open_errors_at(out["zarr"])


def _header(table: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith("| n "))
    return [c.strip() for c in line.strip("|").split("|")]


def _column(table: str, name: str) -> list[str]:
    """The cells of column ``name`` in table.md's rows (every table with that header)."""
    out, header = [], None
    for line in table.splitlines():
        if line.startswith("| n "):
            header = [c.strip() for c in line.strip("|").split("|")]
        elif header and line.startswith("| ") and name in header and line[2:3].isdigit():
            out.append([c.strip() for c in line.strip("|").split("|")][header.index(name)])
    return out


def _flattens(e_s: list[float]) -> int:
    """The index of the first e_s that fell less than 4x from the one before, after falls near 16x (order 4)."""
    ratio = np.array(e_s[:-1]) / np.array(e_s[1:])
    assert ratio[1] == pytest.approx(16.0, rel=0.1)  # order 2s = 4 while above the floor (h = T/10 -> T/20)
    return int(np.flatnonzero(ratio < 4.0)[0]) + 1


def test_a_convergence_study_flattens_at_the_reference_floor(tmp_path):
    study, rows, table, ds = _through_the_package(tmp_path, "loose", LOOSE)
    e_s = [r["e_s"] for r in rows]
    flat = _flattens(e_s)
    accuracy = float(ds["reference_accuracy"].item())
    assert 1e-7 < accuracy < 1e-4  # a solve at rtol 1e-6 over one period
    assert e_s[-1] == pytest.approx(accuracy, rel=0.5)  # where it stopped falling: the reference's own error
    assert all(r["reference_floor_s"] for r in rows[flat:]) and not any(r["roundoff_s"] for r in rows)
    rate_s = _column(table, "rate(e_s)")  # e_lambda and e_hc are at round-off here: their columns say so
    assert rate_s[flat:] == ["reference floor"] * (len(rows) - flat) and "round-off" not in rate_s
    fig = plots.convergence_plot(study, ds, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    (ax,) = [ax for ax in fig.axes if ax.get_title().startswith("solution error")]
    (band,) = ax.patches
    top = band.get_path().vertices @ np.eye(2)
    edge = band.get_transform().transform(top)[:, 1].max()
    assert edge == pytest.approx(ax.transData.transform((1.0, accuracy))[1], abs=1.0)  # the band ends at it
    assert BAND in [t.get_text() for t in fig.legends[0].get_texts()]


def test_a_sweep_flattens_at_the_reference_floor(tmp_path):
    entry = {**LOOSE, "kind": "sweep", "save": "trajectory", "grid": {"length": [0.9, 1.1]}}
    study, rows, table, ds = _through_the_package(tmp_path, "loose_sweep", entry)
    for length in (0.9, 1.1):
        e_s = [r["e_s"] for r in rows if r["length"] == length]
        _flattens(e_s)
        accuracy = float(ds["reference_accuracy"].sel(length=length).item())
        assert e_s[-1] == pytest.approx(accuracy, rel=0.5)
    e_s = _column(table, "e_s")  # the distribution, then the extreme rows; n = 160 (finest) first in its statistics
    finest = [line for line in table.splitlines() if line.startswith("| 160 |")][0]
    assert finest.split("|")[1 + _header(table).index("e_s")].strip().endswith("(reference floor)")
    assert not [c for c in e_s if "round-off" in c]
    fig = plots.sweep_plot(study, ds, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    constant = fig.axes[0]
    assert constant.get_title().startswith("error constant")
    (band,) = [c for c in constant.collections if c.get_paths() and c.get_alpha() == 0.15]
    n = 160
    for length in (0.9, 1.1):  # the band's top at each grid value: the accuracy in units of C, accuracy / h^4
        h = float(study.instance_of(f"length={length}").period) / n
        want = float(ds["reference_accuracy"].sel(length=length).item()) / h**4
        y = band.get_paths()[0].vertices  # data coordinates (the band's transform is the axes' data transform)
        at = np.isclose(y[:, 0], length)
        assert np.any(np.isclose(y[at, 1], want, rtol=1e-9)), (length, want, y[at])
    assert any(t.get_text().startswith(BAND) for t in fig.legends[0].get_texts())
    assert np.isfinite(ds["reference_accuracy"].values).all()  # an estimate per grid value
