"""HBVM(s,s) is the s-stage Gauss collocation method (docs/method.md section 3, properties)."""

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.legendre import gauss_legendre


def gauss_collocation(problem, h, steps, s):
    """Independent s-stage Gauss-Legendre RK for q' = p, p' = -grad U(q) (M = I), fixed point to round-off."""
    c, b = gauss_legendre(s)
    V = np.vander(c, s, increasing=True)  # Lagrange basis via monomials
    A = np.empty((s, s))
    for j in range(s):
        coef = np.linalg.solve(V, np.eye(s)[:, j])  # l_j(t) = sum coef_r t^r
        A[:, j] = [sum(coef[r] * ci ** (r + 1) / (r + 1) for r in range(s)) for ci in c]
    q, p = problem.q0.copy(), problem.p0.copy()
    out = [np.concatenate([q, p])]
    for _ in range(steps):
        Kq = np.tile(p, (s, 1))
        Kp = -problem.grad_U(np.tile(q, (s, 1)))
        for _ in range(200):
            Q = q + h * A @ Kq
            P = p + h * A @ Kp
            new_q, new_p = P, -problem.grad_U(Q)
            d = max(np.abs(new_q - Kq).max(), np.abs(new_p - Kp).max())
            Kq, Kp = new_q, new_p
            if d < 1e-16:
                break
        q = q + h * b @ Kq
        p = p + h * b @ Kp
        out.append(np.concatenate([q, p]))
    return np.array(out)


def henon_heiles():
    """An unconstrained polynomial problem with a nonlinear force (m = 2)."""
    return hc.Problem(
        name="henon_heiles",
        q0=[0.1, -0.2],
        p0=[0.3, 0.1],
        U=lambda Q: 0.5 * (Q[:, 0] ** 2 + Q[:, 1] ** 2) + Q[:, 0] ** 2 * Q[:, 1] - Q[:, 1] ** 3 / 3,
        grad_U=lambda Q: np.stack([Q[:, 0] + 2 * Q[:, 0] * Q[:, 1], Q[:, 1] + Q[:, 0] ** 2 - Q[:, 1] ** 2], axis=1),
    )


@pytest.mark.parametrize("s", [1, 2, 3, 4])
@pytest.mark.parametrize("make", [henon_heiles, lambda: hc.get_problem("theta_pendulum")])
def test_hbvm_ss_equals_gauss_collocation(make, s):
    problem = make()
    h, steps = 0.25, 40
    traj = hc.integrate(problem, hc.HBVM(s, s), h, h * steps, backend="numpy")
    ref = gauss_collocation(problem, h, steps, s)
    np.testing.assert_allclose(traj.y(), ref, rtol=0, atol=1e-13)


def test_k_greater_than_s_differs_from_collocation_on_nonpolynomial_problem():
    """The comparison above can fail: HBVM(4,2) is a different method from Gauss(2) on theta."""
    problem = hc.get_problem("theta_pendulum")
    traj = hc.integrate(problem, hc.HBVM(4, 2), 0.25, 10.0, backend="numpy")
    ref = gauss_collocation(problem, 0.25, 40, 2)
    assert np.abs(traj.y() - ref).max() > 1e-8
