"""Reference slopes in the convergence plots: a method's declared theoretical order, labelled as such;
never an observed rate rounded into a slope."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from hbvm_core.methods import RATTLE  # noqa: E402
from hbvm_workflow.plots import _reference_line, reference_order, theoretical_order  # noqa: E402
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
    study = _study(expected_rates={"e_lambda": 3})  # the declaration wins over the config's claim
    assert reference_order(study, study.methods[0], "e_lambda") == (1.0, "theory")


def test_rattle_declares_its_orders():
    assert {k: RATTLE.orders.get(k) for k in RATTLE_ORDERS} == RATTLE_ORDERS
    assert theoretical_order(RATTLE(), "e_s") == 2.0 and theoretical_order(RATTLE(), "e_lambda") == 1.0


def test_no_declaration_no_observed_slope(monkeypatch):
    monkeypatch.setattr(RATTLE, "orders", None, raising=False)
    study = _study()
    assert reference_order(study, study.methods[0], "e_lambda") == (None, "")
    study = _study(expected_rates={"e_s": 2})
    assert reference_order(study, study.methods[0], "e_s") == (2.0, "expected")


def test_the_label_says_theory():
    ax = Figure().add_subplot()
    _reference_line(ax, [0.1, 0.01], [1e-2, 1e-6], 4.0, "theory", "0.4")
    assert [t.get_text() for t in ax.texts] == ["order 4 (theory)"]
