"""Reference slopes in the convergence plots, by the one rule of docs/configuration.md (Reference slopes): each
curve's own method's order as the study expects it (``expected_rates``, "2s" with the method's s), else the order
the method declares, else none; never an observed rate rounded into a slope."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402
from _errors import made_up_dataset  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from hbvm_core.methods import RATTLE  # noqa: E402
from hbvm_workflow.plots import _reference_line, convergence_plot, reference_order, theoretical_order  # noqa: E402
from hbvm_workflow.study import expand_study  # noqa: E402

#: RATTLE: second order in q and p, first order in lambda (Hairer, Lubich, Wanner, Geometric Numerical
#: Integration, VII.1.4; docs/baselines.md)
RATTLE_ORDERS = {"q": 2, "p": 2, "lam": 1}


def _study(**over):
    cfg = {
        "problem": "planar_pendulum",
        "methods": [{"method": "rattle"}],
        "t_end": 1,
        "h": [0.1, 0.05],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
        **over,
    }
    return expand_study("s", cfg)


def test_declared_orders_give_the_slope(monkeypatch):
    monkeypatch.setattr(RATTLE, "orders", RATTLE_ORDERS, raising=False)
    assert theoretical_order({"method": "rattle"}, "e_s") == 2.0  # the lower of q and p
    assert theoretical_order({"method": "rattle"}, "e_lambda") == 1.0
    assert theoretical_order({"method": "rattle"}, "e_hc") is None  # not declared: no slope
    study = _study(expected_rates={"e_lambda": 3})  # the study's expectation wins over the declaration
    assert reference_order(study, study.methods[0], "e_lambda") == (3.0, "expected")
    assert reference_order(study, study.methods[0], "e_s") == (2.0, "declared")  # none expected: the declared


def test_rattle_declares_its_orders():
    assert {k: RATTLE.orders.get(k) for k in RATTLE_ORDERS} == RATTLE_ORDERS
    assert theoretical_order(RATTLE(), "e_s") == 2.0 and theoretical_order(RATTLE(), "e_lambda") == 1.0


def test_no_declaration_no_observed_slope(monkeypatch):
    monkeypatch.setattr(RATTLE, "orders", None, raising=False)
    study = _study()
    assert reference_order(study, study.methods[0], "e_lambda") == (None, "")
    study = _study(expected_rates={"e_s": 2})
    assert reference_order(study, study.methods[0], "e_s") == (2.0, "expected")


def test_a_multiple_of_s_is_each_methods_own():
    study = expand_study(
        "s2",
        {
            "problem": "conical_pendulum",
            "methods": [{"k": 2, "s": 2}, {"k": 3, "s": 3}, {"method": "rattle"}],
            "periods": 1,
            "period_divisions": [10, 20],
            "errors": {"reference": "exact", "norm": "inf", "sample": "periods"},
            "expected_rates": {"e_s": "2s"},
        },
    )
    got = [reference_order(study, sm, "e_s") for sm in study.methods]
    assert got == [(4.0, "expected"), (6.0, "expected"), (2.0, "declared")]  # RATTLE has no s: its declared 2


def test_the_label_says_where_the_order_comes_from():
    ax = Figure().add_subplot()
    line = _reference_line(ax, [0.1, 0.01], [1e-2, 1e-6], 4.0, "expected", "0.4")
    assert line.get_label() == "order 4 (expected)"  # for the legend
    assert list(ax.texts) == []  # no label on the line: it would cover data or another label


#: the orders of the paper's theory (docs/method.md section 5, "Expected observed rates"): 2 for e_s and e_hc
#: and 1 for e_lambda in tables 1, 3 and 4; 2s for e_s in table2, whose e_lambda and e_hc sit at round-off
#: (lambda is constant) and so get no slope; table2 thus draws 2, 4, 6, 8 for HBVM(1,1) .. HBVM(4,4)
ORACLE = {
    "table1": {"e_s": lambda s: 2, "e_lambda": lambda s: 1, "e_hc": lambda s: 2},
    "table2": {"e_s": lambda s: 2 * s},
    "table3": {"e_s": lambda s: 2, "e_lambda": lambda s: 1, "e_hc": lambda s: 2},
    "table4": {"e_s": lambda s: 2, "e_lambda": lambda s: 1, "e_hc": lambda s: 2},
}
PANELS = {"solution error": "e_s", "multiplier error": "e_lambda", "hidden constraint": "e_hc"}


def _slopes(ax) -> list[tuple[float, str]]:
    """(slope in log-log, colour) of each dotted line of a panel."""
    out = []
    for line in ax.get_lines():
        if line.get_linestyle() == ":":
            x, y = (np.asarray(v, dtype=float) for v in (line.get_xdata(), line.get_ydata()))
            out.append((float(np.log(y[-1] / y[0]) / np.log(x[-1] / x[0])), line.get_color()))
    return out


@pytest.mark.parametrize("name", sorted(ORACLE))
def test_published_studies_draw_the_orders_of_the_theory(name, tmp_path):
    """The published config's studies on errors made up with the theory's orders: each panel draws, per curve,
    the slope the theory gives its method (one grey line where they all agree), each named in the legend; a
    panel where the theory gives none (its errors at round-off) is not drawn, and the title says so."""
    with open("config/config.yaml") as fh:
        study = expand_study(name, yaml.safe_load(fh)["studies"][name])
    oracle = ORACLE[name]
    roundoff = [e for e in PANELS.values() if e not in oracle]
    ds = made_up_dataset(study, lambda e, sm: oracle[e](sm.s) if e in oracle else 1.0, roundoff=roundoff)
    fig = convergence_plot(study, ds, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    seen = set()
    for ax in fig.axes:
        var = PANELS.get(ax.get_title())
        if var is None:
            continue
        seen.add(var)
        slopes = _slopes(ax)
        want = [float(oracle[var](sm.s)) for sm in study.methods]
        if len(set(want)) == 1:
            assert [p for p, _ in slopes] == pytest.approx(want[:1], abs=1e-9), (name, var)
        else:  # one per curve, in its colour
            curves = {line.get_color(): line for line in ax.get_lines() if line.get_linestyle() != ":"}
            assert len(slopes) == len(want) == len(curves), (name, var)
            by_colour = {c: p for p, c in slopes}
            assert [by_colour[f"C{i}"] for i in range(len(want))] == pytest.approx(want, abs=1e-9), (name, var)
        labels = sorted({f"order {p:g} (expected)" for p in want})
        dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert sorted(line.get_label() for line in dotted) == labels, (name, var)
        legend = {t.get_text() for t in fig.legends[0].get_texts()}
        assert set(labels) <= legend, (name, var)
        assert list(ax.texts) == [], (name, var)  # no text in the panel
    assert seen == set(oracle), name  # the round-off panels left out, and named above the figure
    for var in set(PANELS.values()) - set(oracle):
        assert var in fig.get_suptitle() and "round-off" in fig.get_suptitle(), (name, var)


def _two_methods(tmp_path, **over):
    """A planar-pendulum study of HBVM(1,1) and RATTLE on errors made up with order 2 for e_s and e_hc and
    order 1 for e_lambda (RATTLE's declared orders; HBVM(1,1)'s 2s with expected_rates e_s: 2s)."""
    study = _study(methods=[{"k": 1, "s": 1}, {"method": "rattle"}], h=[0.1, 0.05, 0.025], **over)
    orders = {"e_s": 2, "e_lambda": 1, "e_hc": 2}
    return study, made_up_dataset(study, lambda e, sm: orders[e])


def test_one_line_and_one_label_per_distinct_slope(tmp_path):
    """HBVM(1,1) expects order 2 (2s), RATTLE declares 2: one grey dotted line for both, one legend entry that
    names both sources, no text on the panel."""
    study, ds = _two_methods(tmp_path, expected_rates={"e_s": "2s"})
    assert [reference_order(study, sm, "e_s") for sm in study.methods] == [(2.0, "expected"), (2.0, "declared")]
    fig = convergence_plot(study, ds, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    ax = next(ax for ax in fig.axes if ax.get_title() == "solution error")
    (slope,) = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert slope.get_label() == "order 2 (expected/declared)" and slope.get_color() == "0.4"
    assert _slopes(ax)[0][0] == pytest.approx(2.0)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend.count("order 2 (expected/declared)") == 1
    assert all(list(a.texts) == [] for a in fig.axes)


def test_no_slope_where_no_curve_has_a_rate(tmp_path):
    """A curve whose every pair is at round-off has no rate: no slope for it. The multiplier panel with RATTLE's
    rate and HBVM at round-off draws RATTLE's order 1 alone, in RATTLE's colour, from RATTLE's points."""
    study, ds = _two_methods(tmp_path)
    ds["e_lambda"][0] = 3e-16  # HBVM(1,1): lambda at round-off, every pair flagged, no rate
    ds["rate_lambda"][0] = np.nan
    ds["roundoff_lambda"][0, 1:] = True
    fig = convergence_plot(study, ds, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    ax = next(ax for ax in fig.axes if ax.get_title() == "multiplier error")
    ((p, color),) = _slopes(ax)
    assert p == pytest.approx(1.0) and color == "C1"
    rattle = ds["e_lambda"].values[1]
    (slope,) = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    y = np.asarray(slope.get_ydata(), dtype=float)
    assert np.all(y < rattle.max()) and y.min() > 0.1 * rattle.min()  # under RATTLE's errors, not at round-off


def test_the_reference_floor_is_drawn_where_errors_reach_it(tmp_path):
    """A numerical reference (DOP853 at rtol 1e-13, modified_pendulum has no closed form) is accurate to about
    1e-13 over [0, 2], not to round-off: its estimated floor lies in [1e-15, 1e-11] and, where the errors reach
    below it, the e_s panel shades the band under it and the legend names it. A closed-form reference draws none."""
    from hbvm_workflow.plots import reference_floor

    errors = {"reference": "reference", "norm": "inf", "sample": "all"}
    study = _study(
        problem="modified_pendulum", methods=[{"k": 2, "s": 2}], t_end=2, h=[0.1, 0.01, 0.001], errors=errors
    )
    floor = reference_floor(study, study.instance_of(""))
    assert 1e-15 <= floor <= 1e-11
    ds = made_up_dataset(study, lambda e, sm: 6)  # 1e-6 .. 1e-18: down past the floor
    fig = convergence_plot(study, ds, str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))
    ax = next(ax for ax in fig.axes if ax.get_title() == "solution error")
    (band,) = ax.patches
    top = band.get_path().transformed(band.get_transform()).get_extents().y1
    assert top == pytest.approx(ax.transData.transform((1.0, floor))[1], abs=0.5)  # in pixels
    assert "reference floor (DOP853 at rtol 1e-13, estimated)" in [t.get_text() for t in fig.legends[0].get_texts()]
    exact = _study(h=[0.1, 0.01, 0.001])
    assert reference_floor(exact, exact.instance_of("")) is None
    fig = convergence_plot(exact, made_up_dataset(exact, lambda e, sm: 6), str(tmp_path / "g.png"), "/dev/null")
    assert not any(ax.patches for ax in fig.axes)
