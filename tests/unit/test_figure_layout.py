"""Every figure of every study kind (each plot of ``kinds.KINDS``, and the beyond summaries), rendered on small data
and on small real runs (HBVM, RATTLE and DOP853 together, a grid of three values, a 90-character title, a
work-precision and a long-time study), at one column's and at the page's width: no two drawn texts overlap
(titles, axis and tick labels, legends), none lies outside the figure, a panel's notes stay inside its frame, no
legend or note covers a data point, and no text is smaller than ``printed.MIN_PT`` at the printed size.

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
from matplotlib.legend import Legend  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from hbvm_workflow import beyond, kinds, plots, printed  # noqa: E402
from hbvm_workflow.loading import load_studies  # noqa: E402
from hbvm_workflow.study import expand_study  # noqa: E402
from hbvm_workflow.tables import errors_dataset, study_rows  # noqa: E402
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


def _points(fig) -> list:
    """(axes, display coordinates of every drawn data point inside its axes) of each axes of ``fig``: the
    vertices of its lines (reference slopes and floors included) and of its scatter marks."""
    out = []
    for ax in fig.axes:
        pts = [line.get_transform().transform(line.get_xydata()) for line in ax.get_lines() if line.get_visible()]
        pts += [c.get_offset_transform().transform(c.get_offsets()) for c in ax.collections]
        xy = np.concatenate(pts) if pts else np.zeros((0, 2))
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        box = ax.bbox
        inside = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)
        out.append((ax, xy[inside]))
    return out


def _covers(b, xy) -> bool:
    return bool(np.any((xy[:, 0] > b.x0) & (xy[:, 0] < b.x1) & (xy[:, 1] > b.y0) & (xy[:, 1] < b.y1)))


def problems(fig, printed_width: float | None = None) -> list[str]:
    """What is wrong with the figure's texts: each one outside the figure, each pair that overlaps, a panel's
    note outside its frame or over its data, a legend over data, text under ``printed.MIN_PT`` at
    ``printed_width`` inches (the figure's own width by default)."""
    out = []
    texts = drawn_texts(fig)
    W, H = fig.bbox.width, fig.bbox.height
    scale = (printed_width or fig.get_figwidth()) / fig.get_figwidth()
    points = _points(fig)
    for t, b in texts:
        if b.x0 < -SLACK or b.y0 < -SLACK or b.x1 > W + SLACK or b.y1 > H + SLACK:
            out.append(f"outside the figure ({W:.0f} x {H:.0f} px): {t.get_text()!r} at {b.bounds}")
        if t.get_fontsize() * scale < printed.MIN_PT - 1e-9:
            out.append(f"{t.get_fontsize() * scale:.1f} pt printed: {t.get_text()!r}")
    for i, (t1, b1) in enumerate(texts):
        for t2, b2 in texts[i + 1 :]:
            w = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
            h = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
            if w > SLACK and h > SLACK:
                out.append(f"overlap: {t1.get_text()!r} and {t2.get_text()!r}")
    renderer = fig.canvas.get_renderer()
    for ax, xy in points:
        for t in ax.texts:  # a panel's notes and labels: inside its frame, over none of its data
            b = t.get_window_extent(renderer)
            if b.x0 < ax.bbox.x0 - SLACK or b.x1 > ax.bbox.x1 + SLACK or b.y0 < ax.bbox.y0 - SLACK:
                out.append(f"outside its panel: {t.get_text()!r}")
            if b.y1 > ax.bbox.y1 + SLACK or _covers(b, xy):
                out.append(f"outside its panel or over data: {t.get_text()!r}")
    legends = [a for a in fig.findobj(Legend)]
    for legend in legends:
        b = legend.get_window_extent(renderer)
        for ax, xy in points:
            if _covers(b, xy):
                out.append(f"legend over data of {ax.get_title()!r}")
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


#: a sweep's title of 90 characters
LONG_TITLE_SWEEP = "A sweep of the conical pendulum over its length, HBVM(2,2) and HBVM(1,1), a published title"


def _sweep_study(values: int, width: str, title: str = LONG_TITLE_SWEEP):
    grid = {"length": [round(0.5 + 1.5 * i / max(values - 1, 1), 12) for i in range(values)]}
    cfg = {**CONICAL, "kind": "sweep", "grid": grid, "expected_rates": {"e_s": "2s"}, "title": title}
    return expand_study("w", {**cfg, "backend": "auto", "figure": {"width": width}})  # nothing runs here


@pytest.mark.parametrize("width", ["single", "double"])
@pytest.mark.parametrize("values", [3, 400])
def test_the_sweep_figure_reads_at_its_printed_size(values, width, tmp_path):
    """The sweep figure at one column's and at the page's width (``figure: {width: ...}``), over 3 and 400 grid
    values (markers; lines): drawn at that width, its log axes' errors over 14 decades (e_H, e_g made up from
    1e-16 to 1e-2) with labelled ticks that neither overlap nor leave the figure, no text under 7 pt."""
    study = _sweep_study(values, width)
    ds = made_up_dataset(study, _orders)
    spread = 10.0 ** np.linspace(-16, -2, ds.sizes["length"])  # fourteen decades along the grid
    ds["e_H"][:] = spread
    ds["e_g"][:] = spread[::-1]
    fig = plots.sweep_plot(study, ds, f"{tmp_path}/f.png", f"{tmp_path}/f.pdf")
    assert fig.get_figwidth() == pytest.approx(printed.WIDTHS[width])
    assert problems(fig, printed.WIDTHS[width]) == [], (values, width)
    for ax in fig.axes:
        if ax.get_yscale() == "log":
            shown = [t for t in ax.get_yticklabels() if t.get_text() and ax.get_ylim()[0] <= t.get_position()[1]]
            assert len(shown) >= 3, ax.get_title()  # labelled, and few enough not to touch (problems)
    pdf = (tmp_path / "f.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf


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


def test_the_check_finds_a_legend_over_data_a_stray_note_and_small_text():
    """A legend drawn over a curve's points, a panel's note reaching past its frame and 6 pt text are found."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot(np.linspace(0, 1, 50), np.full(50, 0.9), label="a curve near the top")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper right")
    ax.text(0.95, 0.1, "a note running past the frame", transform=ax.transAxes)
    fig.text(0.0, 0.0, "tiny", fontsize=6)
    found = problems(fig)
    assert any(p.startswith("legend over data") for p in found), found
    assert any(p.startswith("outside its panel") and "a note running" in p for p in found), found
    assert any(p == "6.0 pt printed: 'tiny'" for p in found), found
    assert any(p.startswith("3.0 pt printed") for p in problems(fig, printed_width=2.0)), "scaled to print"


def test_convergence_figure_shows_what_is_conserved(tmp_path):
    """The convergence figure's e_H and e_g panels: per method its errors against h (the made-up 1e-16 (1 + i)
    of e_H), an exact zero as a mark on the axis floor (the bottom of the axes, at its h) and said in the title,
    never a value drawn at some small number; no reference slope; no e_g panel without constraints."""
    study = expand_study("c", CONICAL)
    ds = made_up_dataset(study, _orders)
    ds["e_H"][0, 1] = 0.0  # HBVM(2,2) conserves H exactly at the second h
    fig = plots.convergence_plot(study, ds, f"{tmp_path}/f.png", f"{tmp_path}/f.pdf")
    titles = [ax.get_title().replace("\n", " ") for ax in fig.axes]
    assert titles[3:] == ["energy error (zeros: marks on the floor)", "constraint error"]
    for ax, var in zip(fig.axes[3:], ("e_H", "e_g")):
        curves = [line for line in ax.get_lines() if line.get_marker() not in ("None", "")]  # not the floor's
        for c, i in zip(curves, range(2), strict=True):
            e = ds[var].values[i]
            y = np.asarray(c.get_ydata(), dtype=float)
            assert np.array_equal(np.isnan(y), e == 0) and np.array_equal(y[e > 0], e[e > 0])
        assert not [line for line in ax.get_lines() if line.get_linestyle() == ":"]  # no slope
    (marks,) = fig.axes[3].collections  # the one exact zero, at its h, on the floor (axes y = 0)
    shown = marks.get_offset_transform().transform(marks.get_offsets())
    ax = fig.axes[3]
    assert shown[0, 0] == pytest.approx(ax.transData.transform((ds.h.values[1], 1e-16))[0])
    assert shown[0, 1] == pytest.approx(ax.transAxes.transform((0, 0))[1])
    assert not fig.axes[4].collections
    cfg = {**CONICAL, "problem": "theta_pendulum", "t_end": 1, "h": [0.1, 0.05], "errors": {"reference": "self"}}
    del cfg["periods"], cfg["period_divisions"]
    unconstrained = expand_study("u", cfg)
    fig = plots.convergence_plot(
        unconstrained, made_up_dataset(unconstrained, _orders), f"{tmp_path}/u.png", "/dev/null"
    )
    assert "constraint error" not in [ax.get_title() for ax in fig.axes]


# --------------------------------------------------------------------------- figures of real runs
#: a title of 90 characters
LONG_TITLE = "A researcher's own study of HBVM beside RATTLE and DOP853 on the planar pendulum, 2 periods"
PENDULUM = {"problem": "planar_pendulum", "backend": "numpy", "t_end": 2, "title": LONG_TITLE}
ERRORS = {"reference": "reference", "norm": "inf", "sample": "all"}
#: HBVM(k,2) for k = 2, 4, 6 agree to many digits here (U and g of degree at most 2); RATTLE declares its orders
REAL = {
    "mixed": {
        **PENDULUM,
        "methods": [{"k": k, "s": 2} for k in (2, 4, 6)] + [{"method": "rattle"}, {"method": "dop853", "rtol": 1e-8}],
        "h": [0.2, 0.1, 0.05, 0.025],
        "errors": ERRORS,
        "expected_rates": {"e_s": "2s"},
    },
    "grid": {
        **CONICAL,
        "methods": [{"k": 2, "s": 2}, {"method": "rattle"}],
        "grid": {"length": [0.5, 1.0, 2.0]},
        "title": LONG_TITLE,
    },
    "runs": {
        **PENDULUM,
        "methods": [{"k": 2, "s": 2}, {"method": "rattle"}, {"method": "dop853", "rtol": 1e-8}],
        "h": [0.05],
        "errors": ERRORS,
    },
    "wp": {
        **PENDULUM,
        "kind": "work_precision",
        "methods": [
            {"k": 2, "s": 2, "h": [0.25, 0.125, 0.0625]},
            {"method": "rattle", "h": [0.125, 0.0625]},
            {"method": "dop853", "rtol": 1e-6, "h": [0.5]},
            {"method": "dop853", "rtol": 1e-9, "h": [0.5]},
        ],
        "errors": {"reference": "reference", "norm": "inf", "sample": 0.5},
        "timing_repeats": 1,
    },
    "lt": {
        **PENDULUM,
        "kind": "long_time",
        "t_end": 200,
        "h": [0.1],
        "methods": [{"k": 2, "s": 2}, {"method": "rattle"}, {"method": "dop853", "rtol": 1e-8}],
        "errors": {"reference": "none"},
    },
}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """``at(name, width)``: the study ``REAL[name]`` at that printed width, its runs solved (once) into stores."""
    results = str(tmp_path_factory.mktemp("real"))

    def at(name: str, width="double"):
        cfg = {"studies": {name: {**REAL[name], "figure": {"width": width}}}, "results": results}
        (study,) = load_studies(cfg).values()
        return study

    for name in REAL:
        study = at(name)
        for job in study.jobs.values():
            assert solve_job(job)["status"] == "ok"
        if name == "wp":
            from hbvm_workflow.tables import compute_errors

            compute_errors(study, f"{results}/wp.zarr", f"{results}/wp/errors.csv")
    return at


def _convergence(name):
    def draw(study, tmp):
        return plots.convergence_plot(study, errors_dataset(study, study_rows(study)), f"{tmp}/f.png", f"{tmp}/f.pdf")

    return draw


def _beyond(study, tmp):
    from hbvm_workflow import layout

    if study.study_kind == "work_precision":
        rows = beyond.work_precision_rows(study, layout.errors_csv(study.results, study.name))
        return beyond.work_precision_plot(
            [(study.title, rows)], f"{tmp}/f.png", f"{tmp}/f.pdf", repeats=1, width=printed.width(study)
        )
    runs = list(beyond.long_time_runs(study))
    return beyond.long_time_plot([(study.title, runs)], f"{tmp}/f.png", f"{tmp}/f.pdf", printed.width(study))


REAL_FIGURES = {
    "convergence: HBVM, RATTLE, DOP853": ("mixed", _convergence("mixed")),
    "convergence: a grid of three": ("grid", _convergence("grid")),
    **{
        f"{p}: three methods": ("runs", lambda st, tmp, p=p: plots.PLOTS[p](st, f"{tmp}/f.png", f"{tmp}/f.pdf"))
        for p in plots.PLOTS
    },
    "work precision": ("wp", _beyond),
    "long time": ("lt", _beyond),
}


@pytest.mark.parametrize("width", ["single", "double"])
@pytest.mark.parametrize("figure", REAL_FIGURES)
def test_real_figures_read_at_their_printed_size(figure, width, real, tmp_path):
    """Each figure of real runs, at one column's and at the page's width: drawn at that width, nothing
    overlapping, clipped, covering data or under 7 pt; its PDF beside the PNG with embedded TrueType fonts."""
    name, draw = REAL_FIGURES[figure]
    fig = draw(real(name, width), tmp_path)
    assert fig.get_figwidth() == pytest.approx(printed.WIDTHS[width])
    assert problems(fig, printed.WIDTHS[width]) == [], (figure, width)
    pdf = (tmp_path / "f.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf  # TrueType (fonttype 42) embedded, no Type 3 bitmaps
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_identical_curves_are_one_entry_naming_them_all(real, tmp_path):
    """HBVM(2,2), (4,2) and (6,2) on the planar pendulum (U and g of degree at most 2) agree to 8 digits wherever
    above round-off: one curve, one legend entry "HBVM(2,2) = (4,2) = (6,2)"; RATTLE and DOP853 stay apart. The
    long-time figure does the same for runs with the same series."""
    study = real("mixed")
    rows = study_rows(study)
    by = {
        name: np.array([[r[e] for e in ("e_s", "e_lambda", "e_hc")] for r in rows if r["name"] == name])
        for name in ("HBVM(2,2)", "HBVM(4,2)", "HBVM(6,2)")
    }
    for name in ("HBVM(4,2)", "HBVM(6,2)"):  # the premise, from the rows themselves
        np.testing.assert_allclose(by[name], by["HBVM(2,2)"], rtol=1e-8)
    fig = plots.convergence_plot(study, errors_dataset(study, rows), f"{tmp_path}/f.png", f"{tmp_path}/f.pdf")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:3] == ["HBVM(2,2) = (4,2) = (6,2)", "RATTLE", "DOP853(1e-08)"]
    solution = next(ax for ax in fig.axes if ax.get_title() == "solution error")
    assert len([line for line in solution.get_lines() if line.get_linestyle() != ":"]) == 3
    fig = long_time(str(tmp_path), None)  # three runs of the same made-up series
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["HBVM(6,2) = RATTLE = DOP853-proj"]


def test_exact_zeros_are_marks_on_the_floor_not_values(real, tmp_path):
    """Runs whose constraint |g_1| is exactly 0 at some steps (the premise, from the stores): its curve has a gap
    at each zero and the data's own value elsewhere (no zero drawn as some small number), and the panel has marks
    on the axes' bottom edge at those t and says so in its title."""
    study = real("runs")
    trajs = [traj for _, _, traj in plots._runs(study)]
    g1 = [np.abs(traj.g()[:, 0]) for traj in trajs]
    assert any(np.any(g == 0) for g in g1) and all(g.size <= plots.PANEL_POINTS for g in g1)  # no envelope
    fig = plots.constraint_panels_plot(study, f"{tmp_path}/f.png", f"{tmp_path}/f.pdf")
    ax = fig.axes[2]
    assert ax.get_title().replace("\n", " ") == "constraint g_1 (zeros: marks on the floor)"
    for line, g in zip(ax.get_lines(), g1, strict=True):
        y = np.asarray(line.get_ydata(), dtype=float)
        assert np.array_equal(np.isnan(y), g == 0) and np.array_equal(y[g > 0], g[g > 0])
    at = np.concatenate([traj.t[g == 0] for traj, g in zip(trajs, g1)])
    xy = np.concatenate([m.get_offset_transform().transform(m.get_offsets()) for m in ax.collections])
    assert np.allclose(xy[:, 1], ax.transAxes.transform((0, 0))[1])  # on the floor
    assert np.allclose(np.sort(xy[:, 0]), np.sort(ax.transData.transform(np.c_[at, np.ones_like(at)])[:, 0]))


def test_the_figure_key_sets_the_printed_width(tmp_path):
    """figure: {width: single | double | inches}: 3.5, 7 (the default) or the number; a bad value is a one-line
    ConfigError naming the key."""
    from hbvm_core.errors import ConfigError

    def width(figure):
        entry = {**REAL["runs"], **({"figure": figure} if figure is not None else {})}
        (study,) = load_studies({"studies": {"w": entry}, "results": str(tmp_path)}).values()
        return printed.width(study)

    assert [width(None), width({"width": "single"}), width({"width": "double"}), width({"width": 5})] == [7, 3.5, 7, 5]
    for bad in ({"width": "wide"}, {"width": 0}, {"height": 3}):
        with pytest.raises(ConfigError, match=r"studies\.w\.figure") as err:
            width(bad)
        assert "\n" not in str(err.value)


def test_curves_that_coincide_in_one_panel_are_named_in_its_title(tmp_path):
    """Two methods with the same e_lambda but different e_s: both drawn (nested markers), and the multiplier
    panel's title names them as equal there; the solution panel's does not."""
    study = expand_study("c", CONICAL)
    ds = made_up_dataset(study, _orders)
    ds["e_lambda"][1] = ds["e_lambda"][0]
    fig = plots.convergence_plot(study, ds, f"{tmp_path}/f.png", f"{tmp_path}/f.pdf")
    titles = {ax.get_title().replace("\n", " ").split(" (")[0]: ax.get_title().replace("\n", " ") for ax in fig.axes}
    assert titles["multiplier error"] == "multiplier error (HBVM(2,2) = (1,1))"
    assert titles["solution error"] == "solution error"
    assert problems(fig) == []
