"""Each published error convention (docs/method.md section 5) against numbers computed by hand.

A synthetic trajectory of a free particle in R^3 held on the x axis (g(q) = (y, z), M = I, U = 0),
whose exact solution is q = (t, 0, 0), p = (1, 0, 0), lambda = 0 (period 1, for ``periods``): five
points t = 0, 0.5, 1, 1.5, 2 with literal deviations from it, four steps with literal multipliers.
Every expected value below is worked out in the comments from those literals, not by
``hbvm_core.metrics``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.metrics import ErrorConvention, errors
from hbvm_core.trajectory import Trajectory

T = np.array([0.0, 0.5, 1.0, 1.5, 2.0])
#: y - y_exact per point: (x - t, y, z, px - 1, py, pz)
DEV = np.array(
    [
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [0.01, 0.002, -0.001, 0.1, 0.003, 0.004],
        [-0.03, -0.003, 0.003, 0.0, -0.02, 0.01],
        [0.02, 0.004, 0.0, -0.2, 0.01, -0.01],
        [0.05, 0.0, 0.0, 0.0, 0.0, 0.0],
    ]
)
TSTEP = np.array([0.0, 0.5, 1.0, 1.5])
LAM = np.array([[0.1, -0.2], [-0.3, 0.1], [0.2, 0.25], [0.05, 0.0]])


def exact(t):
    t = np.atleast_1d(np.asarray(t, dtype=float))
    n = len(t)
    q = np.stack([t, np.zeros(n), np.zeros(n)], axis=1)
    p = np.tile([1.0, 0.0, 0.0], (n, 1))
    return q, p, np.zeros((n, 2))


def particle(with_exact: bool = True) -> hc.Problem:
    return hc.Problem(
        name="rail",
        q0=np.zeros(3),
        p0=np.array([1.0, 0.0, 0.0]),
        U=lambda Q: np.zeros(len(Q)),
        grad_U=lambda Q: np.zeros_like(Q),
        g=lambda Q: Q[:, 1:3].copy(),
        G=lambda Q: np.broadcast_to(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), (len(Q), 3, 2)).copy(),
        d2g=lambda Q, V: np.zeros((len(Q), 2)),
        exact=exact if with_exact else None,
        period=1.0,
    )


def trajectory(problem, t=T, dev=DEV, tstep=TSTEP, lam=LAM, h=0.5) -> Trajectory:
    q_ex, p_ex, _ = exact(t)
    return Trajectory(
        problem=problem,
        method=None,
        h=h,
        t=t,
        q=q_ex + dev[:, :3],
        p=p_ex + dev[:, 3:],
        tstep=tstep,
        lam=lam,
        iterations=np.ones(len(tstep), dtype=np.int32),
        attrs={"t_end": float(t[-1]), "steps": len(tstep)},
    )


# Hand values (rows are the points t = 0, 0.5, 1, 1.5, 2):
#   ||dev||_1   = 0, 0.12, 0.066, 0.244, 0.05          ||dev||_inf = 0, 0.1, 0.03, 0.2, 0.05
#   ||dev||_2 at t = 1.5: sqrt(4e-4 + 1.6e-5 + 0 + 4e-2 + 1e-4 + 1e-4) = sqrt(0.040616) (the largest)
#   |lam|_1 per step = 0.3, 0.4, 0.45, 0.05            |lam|_inf = 0.2, 0.3, 0.25, 0.05
#   H = |p|^2 / 2, H0 = 0.5: at t = 0.5 (1.21 + 9e-6 + 1.6e-5) / 2 - 0.5 = +0.1050125, at t = 1.5
#   (0.64 + 1e-4 + 1e-4) / 2 - 0.5 = -0.1799: the largest in size is below H0
#   e_g = max |y|, |z| = 0.004 (at t = 1.5; at t = 1 |y| + |z| = 0.006 is larger, the inf-norm is not)
#   hidden = (py, pz): t = 1 gives (-0.02, 0.01): inf 0.02, 1-norm 0.03 (the largest of each)
E_H, E_G = 0.1799, 0.004
#: a few operations on O(1) numbers: a few eps
TOL = 8 * np.finfo(float).eps


def check(found: dict, expected: dict) -> None:
    assert set(found) == {"e_s", "e_lambda", "e_H", "e_g", "e_hc"}
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, rel=TOL, abs=TOL), (key, found[key], value)


def test_table1_exact_1_norm_every_step():
    """table1: exact, ||.||_1 at every point and step, e_hc in the same norm."""
    found = errors(trajectory(particle()), ErrorConvention(reference="exact", norm=1, sample="all"))
    check(found, {"e_s": 0.244, "e_lambda": 0.45, "e_H": E_H, "e_g": E_G, "e_hc": 0.03})


def test_table2_exact_inf_norm_at_whole_periods_lambda_at_every_step():
    """table2: e_s at t = 1, 2 only (inf: max(0.03, 0.05)); lambda_sample: all (max 0.3, not 0.25 at t = 1)."""
    conv = ErrorConvention(reference="exact", norm="inf", sample="periods", lambda_sample="all")
    check(errors(trajectory(particle()), conv), {"e_s": 0.05, "e_lambda": 0.3, "e_H": E_H, "e_g": E_G, "e_hc": 0.02})
    # without lambda_sample, lambda is sampled as e_s: at t = 1 only (t = 2 has no step): 0.25
    conv = ErrorConvention(reference="exact", norm="inf", sample="periods")
    assert errors(trajectory(particle()), conv)["e_lambda"] == pytest.approx(0.25, rel=TOL)


def test_a_time_spacing_and_the_2_norm():
    """sample 1.5: points t = 0, 1.5 (1-norm 0.244); the 2-norm at every point: sqrt(0.040616) at t = 1.5."""
    found = errors(trajectory(particle()), ErrorConvention(reference="exact", norm=1, sample=1.5))
    check(found, {"e_s": 0.244, "e_lambda": 0.3})  # lambda at steps t = 0 (0.3) and 1.5 (0.05)
    found = errors(trajectory(particle()), ErrorConvention(reference="exact", norm=2, sample="all"))
    check(found, {"e_s": math.sqrt(0.040616), "e_hc": math.sqrt(0.0005)})  # hidden at t = 1: sqrt(4e-4 + 1e-4)


def test_table3_self_convergence_inf_norm_hc_in_the_1_norm():
    """table3/4: against the h/2 run at t = 0, 1, 2 (sample 1.0), e_hc in the 1-norm over every point.

    The h/2 run is exact except x = 1.007 at t = 1, x = 2.05 at t = 2 and lambda = (0.2, 0.05) at t = 1:
    e_s = max(0, |0.97 - 1.007| = 0.037 (the others at t = 1 are at most 0.02), 0) = 0.037;
    e_lambda = max(0 at t = 0, |0.25 - 0.05| = 0.2 at t = 1) = 0.2 (t = 2 has no step)."""
    t2 = np.arange(9) * 0.25
    dev2 = np.zeros((9, 6))
    dev2[4, 0], dev2[8, 0] = 0.007, 0.05
    lam2 = np.zeros((8, 2))
    lam2[0] = LAM[0]
    lam2[4] = [0.2, 0.05]
    partner = trajectory(particle(False), t=t2, dev=dev2, tstep=t2[:-1], lam=lam2, h=0.25)
    conv = ErrorConvention(reference="self", norm="inf", sample=1.0, hc_norm=1)
    found = errors(trajectory(particle(False)), conv, partner=partner)
    check(found, {"e_s": 0.037, "e_lambda": 0.2, "e_H": E_H, "e_g": E_G, "e_hc": 0.03})
    # without hc_norm the hidden constraint is in the inf-norm: 0.02
    found = errors(trajectory(particle(False)), ErrorConvention(reference="self", norm="inf", sample=1.0), partner)
    assert found["e_hc"] == pytest.approx(0.02, rel=TOL)


def test_reference_the_index_reduced_ode():
    """reference: reference without a closed form integrates the index-reduced ODE (DOP853, rtol 1e-13);
    on the rail it is x = t, px = 1, lambda = 0 again, so the table1 numbers come back to its tolerance."""
    conv = ErrorConvention(reference="reference", norm=1, sample="all")
    found = errors(trajectory(particle(False)), conv)
    for key, value in {"e_s": 0.244, "e_lambda": 0.45, "e_hc": 0.03}.items():
        assert found[key] == pytest.approx(value, abs=1e-11), key  # the ODE's tolerance times |y| ~ 2
