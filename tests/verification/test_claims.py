"""Every registered method's claims (``Method.orders``, ``Method.conserves``), checked by one test against runs.

Parametrised over each registered method class (``hbvm_core.methods.registered``: HBVM per multiplier,
RATTLE, DOP853, IDA, and a method a test module registered) and each entry it declares in ``EXAMPLES``,
on the planar pendulum against its closed form:

- orders in h: the observed rates of the global errors between successive halvings of h, pairs at the
  round-off floor dropped as the tables drop them (``metrics.at_roundoff``): the state (q, p) has the order
  min(q, p) claimed, and each of q, p and lambda at least its claimed order (a claim holds for every
  problem; on one problem a component may converge faster: the pendulum's q for HBVM);
- orders None (a tolerance method): the state's error shrinks with the tolerance (rtol 1e-4 -> 1e-7);
- every quantity it claims to conserve (H, g, the hidden constraint) stays at the round-off floor.
"""

from __future__ import annotations

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.methods import method_from_entry, registered
from hbvm_core.metrics import ROUNDOFF_ULPS, at_roundoff, rates

EPS = np.finfo(float).eps
HS = [0.1, 0.05, 0.025]
T_END = 10.0
TOLS = (1e-4, 1e-7)
CASES = [(cls, entry) for cls in registered() for entry in cls.EXAMPLES]


def _errors(problem, traj) -> dict[str, float]:
    q, p, _ = problem.exact(traj.t)
    lam = problem.exact(traj.tstep)[2]
    e = {
        "q": float(np.abs(traj.q - q).max()),
        "p": float(np.abs(traj.p - p).max()),
        "lam": float(np.abs(traj.lam - lam).max()),
    }
    return e | {"state": max(e["q"], e["p"])}


def _floor(traj) -> dict[str, float]:
    """The round-off floor of each conserved quantity: ROUNDOFF_ULPS eps times its scale (H: |H0|; g and the
    hidden constraint: |y|^2, g = q.q - L^2 and G^T M^-1 p = q.p for the planar pendulum)."""
    y = max(1.0, float(np.abs(traj.y()).max()))
    scale = {"H": max(1.0, abs(float(traj.H()[0]))), "g": y * y, "hidden": y * y}
    return {key: ROUNDOFF_ULPS * EPS * value for key, value in scale.items()}


def _drift(traj) -> dict[str, float]:
    return {
        "H": float(traj.energy_error().max()),
        "g": float(np.abs(traj.g()).max()),
        "hidden": float(np.abs(traj.hidden()).max()),
    }


@pytest.mark.parametrize("cls,entry", CASES, ids=[f"{c.__name__}-{method_from_entry(e).label()}" for c, e in CASES])
def test_a_method_keeps_its_declared_claims(planar, cls, entry):
    method = method_from_entry(entry)
    assert type(method) is cls and set(method.orders) == {"q", "p", "lam"}
    assert method.conserves <= {"H", "g", "hidden"}
    if all(order is None for order in method.orders.values()):  # a tolerance method: the error follows rtol
        # output step 1: DOP853 projected and restarted at each output step is at round-off for shorter ones
        runs = [
            hc.integrate(planar, method_from_entry({**entry, "rtol": tol, "atol": tol}), 1.0, T_END, backend="numpy")
            for tol in TOLS
        ]
        loose, tight = (_errors(planar, traj)["state"] for traj in runs)
        assert tight < loose / 30, (loose, tight)  # 1000x the tolerance: at least 30x the accuracy
    else:
        # numpy: the method's claims, not the compiled loop's (which compiles: the slow tier compares the two)
        runs = [hc.integrate(planar, method, h, T_END, backend="numpy") for h in HS]
        errors = [_errors(planar, traj) for traj in runs]
        # round-off scales as the tables' (metrics.roundoff_scales): |y| <= 1 here, lambda of its own size
        scale = {"q": 1.0, "p": 1.0, "state": 1.0, "lam": max(1.0, float(np.abs(runs[-1].lam).max()))}
        claims = method.orders | {"state": min(method.orders["q"], method.orders["p"])}
        for var, order in claims.items():
            e = [x[var] for x in errors]
            observed = [r for i, r in enumerate(rates(HS, e)) if i and not at_roundoff(e[i - 1], e[i], scale[var])]
            assert observed, f"{var}: every error at round-off {e}: no order to check"
            if var == "state":  # the claimed order, seen within 0.35 (pre-asymptotic terms on three halvings)
                assert all(abs(r - order) < 0.35 for r in observed), (var, order, observed, e)
            else:
                assert all(r > order - 0.35 for r in observed), (var, order, observed, e)
    for traj in runs:
        floor, drift = _floor(traj), _drift(traj)
        for key in method.conserves:
            assert drift[key] <= floor[key], (key, drift[key], floor[key])
