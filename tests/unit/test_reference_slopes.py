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
    _reference_line(ax, [0.1, 0.01], [1e-2, 1e-6], 4.0, "expected", "0.4")
    assert [t.get_text() for t in ax.texts] == ["order 4 (expected)"]


#: the orders of the paper's theory (docs/method.md section 5, "Expected observed rates"): 2 for e_s and e_hc
#: and 1 for e_lambda in tables 1, 3 and 4; 2s for e_s in table2, whose e_lambda and e_hc sit at round-off
#: (lambda is constant) and so get no slope; table2 thus draws 2, 4, 6, 8 for HBVM(1,1) .. HBVM(4,4)
ORACLE = {
    "table1": {"e_s": lambda s: 2, "e_lambda": lambda s: 1, "e_hc": lambda s: 2},
    "table2": {"e_s": lambda s: 2 * s},
    "table3": {"e_s": lambda s: 2, "e_lambda": lambda s: 1, "e_hc": lambda s: 2},
    "table4": {"e_s": lambda s: 2, "e_lambda": lambda s: 1, "e_hc": lambda s: 2},
}
PANELS = {"solution error e_s": "e_s", "multiplier error e_λ": "e_lambda", "hidden constraint e_hc": "e_hc"}


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
    the slope the theory gives its method (one grey line where they all agree), and nothing where the theory
    gives none."""
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
        if var not in oracle:
            assert slopes == [], (name, var)
            continue
        want = [float(oracle[var](sm.s)) for sm in study.methods]
        if len(set(want)) == 1:
            assert [p for p, _ in slopes] == pytest.approx(want[:1], abs=1e-9), (name, var)
        else:  # one per curve, in its colour
            curves = {line.get_color(): line for line in ax.get_lines() if line.get_linestyle() != ":"}
            assert len(slopes) == len(want) == len(curves), (name, var)
            by_colour = {c: p for p, c in slopes}
            assert [by_colour[f"C{i}"] for i in range(len(want))] == pytest.approx(want, abs=1e-9), (name, var)
        labels = sorted({f"order {p:g} (expected)" for p in want}) if len(set(want)) == 1 else None
        labels = labels or sorted(f"order {p:g} (expected)" for p in want)
        assert sorted(t.get_text() for t in ax.texts) == labels, (name, var)
    assert seen == set(PANELS.values()), name
