"""The figures of single runs (solution_error, invariants, constraint_panels) on real stores of a grid study:
one curve per grid combination, labelled with it, each against its combination's period; without a grid the
labels are as before."""

from __future__ import annotations

import numpy as np
import pytest

from hbvm_workflow import plots
from hbvm_workflow.loading import load_studies
from hbvm_workflow.worker import solve_job

LENGTHS = [1.0, 2.0]
CONICAL = {
    "problem": "conical_pendulum",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}],
    "periods": 1,
    "period_divisions": [20],
    "errors": {"reference": "exact", "norm": "inf", "sample": "all"},
}


def solved(tmp_path, **entry):
    """The study ``s`` of ``CONICAL`` updated by ``entry``, its runs solved into stores under tmp_path."""
    (study,) = load_studies({"studies": {"s": {**CONICAL, **entry}}, "results": str(tmp_path)}).values()
    for job in study.jobs.values():
        assert solve_job(job)["status"] == "ok"
    return study


@pytest.fixture(scope="module")
def grid_study(tmp_path_factory):
    return solved(tmp_path_factory.mktemp("grid"), grid={"length": LENGTHS})


def labels(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines()]


@pytest.mark.parametrize("plot", ["solution_error", "invariants", "constraint_panels"])
def test_one_curve_per_combination_labelled_with_it(grid_study, tmp_path, plot):
    fig = plots.PLOTS[plot](grid_study, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    assert (tmp_path / "f.png").stat().st_size > 10_000
    want = [f"HBVM(2,2), h = T/20, length={v}" for v in LENGTHS]
    for ax in fig.axes:
        assert labels(ax) == want, (plot, ax.get_title())
    legend = [t.get_text() for t in fig.legends[0].get_texts()]  # one legend, below the panels
    assert legend == want
    # the curves are the combinations' own: different numbers for different lengths
    for ax in fig.axes:
        y1, y2 = (np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines())
        if not (np.all(np.isnan(y1)) and np.all(np.isnan(y2))):  # not both exactly conserved (zeros: gaps)
            assert not np.array_equal(y1, y2), (plot, ax.get_title())


def test_solution_error_of_each_combination_is_against_its_own_period(grid_study, tmp_path):
    fig = plots.solution_error_plot(grid_study, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    periods = [inst.period for inst in grid_study.instances]
    assert periods[0] != pytest.approx(periods[1])  # the lengths change the period
    for line in fig.axes[0].get_lines():
        x = np.asarray(line.get_xdata(), dtype=float)
        assert x[0] == 0.0 and x[-1] == pytest.approx(1.0, rel=1e-12)  # one period of each combination
    assert fig.axes[0].get_xlabel() == "t / T (periods)"


def test_without_a_grid_one_curve_per_run_labelled_as_before(tmp_path):
    study = solved(tmp_path)
    fig = plots.invariants_plot(study, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    assert [labels(ax) for ax in fig.axes] == [["HBVM(2,2), h = T/20"]] * 4
