"""The published check values of docs/method.md section 5 and the orders the paper reports."""

import numpy as np
import pytest
from _util import agrees, fitted_order

import hbvm_core as hc
from hbvm_core.metrics import PUBLISHED, errors, rates

TABLE1 = [  # method s, n, e_s, e_lambda, e_hc
    (1, 0, 2.5700e-02, 3.4253e-02, 2.3487e-03),
    (1, 3, 4.0181e-04, 4.3835e-03, 3.6633e-05),
    (2, 1, 4.1412e-04, 1.7585e-02, 5.8670e-04),
    (3, 3, 2.5815e-05, 4.3958e-03, 3.6634e-05),
]
TABLE2 = [(1, 10, 1.1543e00), (2, 10, 1.1168e-02), (3, 20, 5.0199e-07), (4, 20, 1.9676e-10)]


@pytest.mark.parametrize("s,n,e_s,e_lambda,e_hc", TABLE1)
def test_table1_check_values(planar, s, n, e_s, e_lambda, e_hc):
    e = errors(hc.integrate(planar, hc.HBVM(s, s), 0.1 * 2.0**-n, 10.0, backend="numpy"), PUBLISHED["table1"])
    for key, published in (("e_s", e_s), ("e_lambda", e_lambda), ("e_hc", e_hc)):
        assert agrees(e[key], published), (key, e[key], published)
    assert e["e_H"] < 1e-14 and e["e_g"] < 1e-14


@pytest.mark.parametrize("s,n,e_s", TABLE2)
def test_table2_check_values(conical, s, n, e_s):
    T = conical.period
    e = errors(hc.integrate(conical, hc.HBVM(s, s), T / n, 10 * T, backend="numpy"), PUBLISHED["table2"])
    assert agrees(e["e_s"], e_s), (e["e_s"], e_s)
    assert e["e_lambda"] < 1e-12 and e["e_hc"] < 1e-12  # lambda is constant: both at round-off


@pytest.mark.parametrize("s", [1, 2, 3])
def test_planar_orders(planar, s):
    """Order 2 for e_s and e_hc, 1 for e_lambda (table1), measured from runs."""
    hs = 0.1 * 2.0 ** -np.arange(2, 6)
    es = [errors(hc.integrate(planar, hc.HBVM(s, s), h, 10.0, backend="numpy"), PUBLISHED["table1"]) for h in hs]
    assert fitted_order(hs, [e["e_s"] for e in es]) == pytest.approx(2, abs=0.1)
    assert fitted_order(hs, [e["e_hc"] for e in es]) == pytest.approx(2, abs=0.1)
    assert fitted_order(hs, [e["e_lambda"] for e in es]) == pytest.approx(1, abs=0.1)


@pytest.mark.parametrize("s,ns", [(1, (40, 60, 80)), (2, (20, 30, 40)), (3, (10, 20, 30)), (4, (10, 15, 20))])
def test_conical_order_2s(conical, s, ns):
    """Order 2s when the exact multiplier is constant (table2)."""
    T = conical.period
    hs = [T / n for n in ns]
    es = [
        errors(hc.integrate(conical, hc.HBVM(s, s), h, 10 * T, backend="numpy"), PUBLISHED["table2"])["e_s"] for h in hs
    ]
    r = rates(hs, es)
    assert np.all(np.abs(r[1:] - 2 * s) < 0.25), r


def test_tethered_self_convergence_orders(tethered):
    """table4 convention (self-convergence at t = 0.1 j): e_s, e_hc order 2, e_lambda order 1."""
    hs = [0.1, 0.05, 0.025]
    runs = [hc.integrate(tethered, hc.HBVM(6, 2), h, 10.0, backend="numpy") for h in hs + [0.0125]]
    es = [errors(runs[i], PUBLISHED["table4"], runs[i + 1]) for i in range(3)]
    assert rates(hs, [e["e_s"] for e in es])[-1] == pytest.approx(2, abs=0.15)
    assert rates(hs, [e["e_hc"] for e in es])[-1] == pytest.approx(2, abs=0.15)
    assert rates(hs, [e["e_lambda"] for e in es])[-1] == pytest.approx(1, abs=0.1)


@pytest.mark.slow  # the HBVM(12,6) reference compiles its loop
def test_references_agree(planar):
    """The closed form, the ODE reference and the published HBVM(12,6) theta reference agree."""
    t = np.linspace(0, 10, 101)
    exact = planar.exact(t)
    for reference_kind in ("ode", "hbvm"):
        ref = hc.references.reference_solution(planar, t, reference_kind=reference_kind)
        for a, b in zip(exact, ref):
            np.testing.assert_allclose(a, b, atol=1e-11)
