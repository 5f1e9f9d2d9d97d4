"""Every figure of every study kind (each plot of ``kinds.KINDS``, and the beyond summaries) rendered on small data:
no two drawn texts overlap (titles, axis and tick labels, legends, annotations) and none lies outside the figure.

The texts are those matplotlib draws (``Text.draw`` recorded during an Agg canvas's ``draw()``), with their window
extents from the same renderer; a pixel of slack for antialiasing."""

from __future__ import annotations

import math
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from _errors import made_up_dataset  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from hbvm_workflow import beyond, kinds, plots  # noqa: E402
from hbvm_workflow.config import load_studies  # noqa: E402
from hbvm_workflow.study import expand_study  # noqa: E402
from hbvm_workflow.worker import solve_job  # noqa: E402

#: pixels two boxes may share, and a box may reach past the figure's edge (antialiasing)
SLACK = 1.0


def drawn_texts(fig) -> list:
    """(text, extent) of every text matplotlib draws for ``fig``."""
    seen = []
    original = Text.draw

    def draw(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            seen.append((self, self.get_window_extent(renderer)))

    Text.draw = draw
    try:
        FigureCanvasAgg(fig).draw()  # a Figure made without pyplot has a base canvas that draws nothing
    finally:
        Text.draw = original
    return seen


def problems(fig) -> list[str]:
    """What is wrong with the figure's texts: each one outside the figure, each pair that overlaps."""
    out = []
    texts = drawn_texts(fig)
    W, H = fig.bbox.width, fig.bbox.height
    for t, b in texts:
        if b.x0 < -SLACK or b.y0 < -SLACK or b.x1 > W + SLACK or b.y1 > H + SLACK:
            out.append(f"outside the figure ({W:.0f} x {H:.0f} px): {t.get_text()!r} at {b.bounds}")
    for i, (t1, b1) in enumerate(texts):
        for t2, b2 in texts[i + 1 :]:
            w = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
            h = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
            if w > SLACK and h > SLACK:
                out.append(f"overlap: {t1.get_text()!r} and {t2.get_text()!r}")
    return out


CONICAL = {
    "problem": "conical_pendulum",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}, {"k": 1, "s": 1}],
    "periods": 1,
    "period_divisions": [10, 20, 40],
    "errors": {"reference": "exact", "norm": "inf", "sample": "all"},
    "title": "Table 2: conical pendulum, HBVM(s,s), a title as long as the published ones",
}


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """A small conical-pendulum study (two lengths) with its runs in stores: for the figures of single runs."""
    tmp = tmp_path_factory.mktemp("solved")
    entry = {**CONICAL, "methods": [{"k": 2, "s": 2}], "period_divisions": [20], "grid": {"length": [1.0, 2.0]}}
    (study,) = load_studies({"studies": {"s": entry}, "results": str(tmp)}).values()
    for job in study.jobs.values():
        assert solve_job(job)["status"] == "ok"
    return study


def _orders(e, sm):
    return {"e_s": 2.0 * sm.s, "e_lambda": 1.0, "e_hc": 2.0}[e]


def convergence(tmp, solved):
    study = expand_study("c", {**CONICAL, "grid": {"length": [1.0, 2.0]}, "expected_rates": {"e_s": "2s"}})
    return plots.convergence_plot(study, made_up_dataset(study, _orders), f"{tmp}/f.png", f"{tmp}/f.pdf")


def sweep(tmp, solved):
    cfg = {**CONICAL, "kind": "sweep", "grid": {"length": [0.5, 1.0, 2.0]}, "expected_rates": {"e_s": "2s"}}
    cfg["backend"] = "auto"  # a sweep saves summaries (the compiled ensemble): no numpy loop; nothing runs here
    study = expand_study("w", cfg)
    return plots.sweep_plot(study, made_up_dataset(study, _orders), f"{tmp}/f.png", f"{tmp}/f.pdf")


def single_run(plot):
    return lambda tmp, solved: plots.PLOTS[plot](solved, f"{tmp}/f.png", f"{tmp}/f.pdf")


def _wp_rows(problem: str) -> list[dict]:
    rows = []
    for fam, cost in (("HBVM(6,2)", 1e-3), ("HBVM(6,3)-poly-proj", 5e-4), ("RATTLE", 3e-3), ("DOP853", 2e-2)):
        for j in range(4):
            e = 10.0 ** -(2 + 2 * j)
            rows.append({"problem": problem, "family": fam, "e_s": e, "wall_s": cost * 2.0**j, "status": "ok"})
    return rows


def work_precision(tmp, solved, n=1):
    panels = [(f"Work precision: {p}", _wp_rows(p)) for p in ("planar_pendulum", "conical_pendulum")[:n]]
    panels += [
        (f"Work precision: {p}", _wp_rows(p)) for p in ("modified_pendulum", "tethered_satellites")[: max(n - 2, 0)]
    ]
    return beyond.work_precision_plot(panels, f"{tmp}/f.png", f"{tmp}/f.pdf", repeats=5)


def long_time(tmp, solved, n=1):
    t = np.linspace(0, 1e4, 2001)
    series = {"t": t, "dH": 1e-15 * (1 + t), "g": 1e-16 * np.ones_like(t), "hc": 1e-12 * np.sqrt(1 + t)}
    runs = [(SimpleNamespace(name=name), series) for name in ("HBVM(6,2)", "RATTLE", "DOP853-proj")]
    panels = [(p, runs) for p in ("planar_pendulum", "tethered_satellites")[:n]]
    return beyond.long_time_plot(panels, f"{tmp}/f.png", f"{tmp}/f.pdf")


#: each plot of kinds.KINDS: how to draw it on small data
FIGURES = {
    "convergence": convergence,
    "sweep": sweep,
    "solution_error": single_run("solution_error"),
    "invariants": single_run("invariants"),
    "constraint_panels": single_run("constraint_panels"),
    "work_precision": work_precision,
    "long_time": long_time,
}
#: and the summaries over the beyond studies (results/beyond/), several problems in one figure
SUMMARIES = {
    "work_precision (4 problems)": lambda tmp, solved: work_precision(tmp, solved, 4),
    "long_time (2 problems)": lambda tmp, solved: long_time(tmp, solved, 2),
}


def test_every_plot_of_every_kind_is_drawn_here():
    assert set(FIGURES) == set(kinds.plot_names())


@pytest.mark.parametrize(
    "plot", [*FIGURES, *(pytest.param(name, marks=pytest.mark.slow) for name in SUMMARIES)]
)  # the summaries: the same code with more panels, seconds each
def test_no_text_overlaps_or_leaves_the_figure(plot, solved, tmp_path):
    fig = {**FIGURES, **SUMMARIES}[plot](str(tmp_path), solved)
    assert fig is not None and math.isfinite(fig.bbox.width)
    assert problems(fig) == [], plot


def test_the_check_finds_an_overlap_and_a_clipped_title():
    """The checker itself: two texts at one place, and a title wider than its figure, are found."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2))
    fig.text(0.5, 0.5, "one")
    fig.text(0.5, 0.5, "two")
    fig.suptitle("a title far too long for a figure three inches wide, clipped at both edges")
    found = problems(fig)
    assert any(p.startswith("overlap: 'one' and 'two'") for p in found), found
    assert any(p.startswith("outside the figure") and "title far too long" in p for p in found), found


def test_convergence_figure_shows_what_is_conserved(tmp_path):
    """The convergence figure's e_H and e_g panels: per method its errors against h (the made-up 1e-16 (1 + i)
    of e_H, exact zeros drawn at ZERO_FLOOR), no reference slope; no e_g panel without constraints."""
    study = expand_study("c", CONICAL)
    ds = made_up_dataset(study, _orders)
    ds["e_H"][0] = 0.0  # HBVM(2,2) conserves H exactly here
    fig = plots.convergence_plot(study, ds, f"{tmp_path}/f.png", f"{tmp_path}/f.pdf")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[3:] == [f"energy error e_H (0 at {plots.ZERO_FLOOR:g})", "constraint error e_g"]
    for ax, var in zip(fig.axes[3:], ("e_H", "e_g")):
        curves = [line for line in ax.get_lines() if line.get_marker() not in ("None", "")]  # not the floor's
        assert [np.asarray(c.get_ydata()).tolist() for c in curves] == [
            np.where(ds[var].values[i] > 0, ds[var].values[i], plots.ZERO_FLOOR).tolist() for i in range(2)
        ]
        assert not [line for line in ax.get_lines() if line.get_linestyle() == ":"]  # no slope
    cfg = {**CONICAL, "problem": "theta_pendulum", "t_end": 1, "h": [0.1, 0.05], "errors": {"reference": "self"}}
    del cfg["periods"], cfg["period_divisions"]
    unconstrained = expand_study("u", cfg)
    fig = plots.convergence_plot(
        unconstrained, made_up_dataset(unconstrained, _orders), f"{tmp_path}/u.png", "/dev/null"
    )
    assert "constraint error e_g" not in [ax.get_title() for ax in fig.axes]
