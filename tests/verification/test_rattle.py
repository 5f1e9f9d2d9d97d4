"""RATTLE baseline: second order, symplectic, constraints to round-off, quadratic invariants conserved."""

import dataclasses

import numpy as np
import pytest
from _util import fitted_order

import hbvm_core as hc
from hbvm_core.methods import DOP853, HBVM, RATTLE, from_spec
from hbvm_core.problems.pendulum import theta_to_planar


def _state_error(problem, traj):
    q, p, lam = problem.exact(traj.t)
    return np.abs(np.concatenate([traj.q - q, traj.p - p], axis=1)).max()


def test_rattle_is_second_order_with_constraints_at_roundoff(planar):
    hs = [0.1, 0.05, 0.025, 0.0125]
    e_s, e_lam = [], []
    for h in hs:
        traj = hc.integrate(planar, RATTLE(), h, 10.0)
        e_s.append(_state_error(planar, traj))
        e_lam.append(np.abs(traj.lam - planar.exact(traj.tstep)[2]).max())
        assert np.abs(traj.g()).max() <= 1e-15
        assert np.abs(traj.hidden()).max() <= 1e-15
    assert abs(fitted_order(hs, e_s) - 2.0) < 0.1
    # lam is the position multiplier in docs/method.md's convention p' = -grad U - G lambda: first order in lambda(t_n)
    assert abs(fitted_order(hs, e_lam) - 1.0) < 0.2
    assert e_lam[0] < 0.05


def _theta_flow(method, problem, z, h, steps):
    """(theta, p_theta) -> RATTLE flow -> (theta, p_theta); p_theta = x p_y - y p_x is conjugate to theta."""
    q, p = theta_to_planar(np.array([z[0]]), np.array([z[1]]))
    q, p = q[0], p[0]
    stepper = method.stepper(problem)
    for n in range(steps):
        dq, dp, _, _ = stepper.step(q, p, h, n, n * h)
        q, p = q + dq, p + dp
    return np.array([np.arctan2(q[0], -q[1]), q[0] * p[1] - q[1] * p[0]])


def _jacobian_det(method, problem, z=(0.3, 1.2), h=0.2, steps=50, d=1e-5) -> float:
    J = np.empty((2, 2))
    for j in range(2):
        e = np.zeros(2)
        e[j] = d
        J[:, j] = (
            _theta_flow(method, problem, np.add(z, e), h, steps)
            - _theta_flow(method, problem, np.subtract(z, e), h, steps)
        ) / (2 * d)
    return float(np.linalg.det(J))


def test_rattle_flow_is_symplectic_on_the_constraint_manifold(planar):
    """In the canonical coordinates (theta, p_theta) of the manifold the 50-step map preserves area."""
    assert abs(_jacobian_det(RATTLE(), planar) - 1.0) < 1e-8
    # the check discriminates: HBVM(1,1) with a constant multiplier is not symplectic here
    assert abs(_jacobian_det(HBVM(1, 1), planar) - 1.0) > 1e-5


def test_rattle_conserves_angular_momentum_of_the_spherical_pendulum(conical):
    """L_z = x p_y - y p_x is a quadratic invariant of the spherical pendulum; RATTLE keeps it to round-off."""
    q0 = np.array([np.sin(0.7), 0.0, -np.cos(0.7)])
    p0 = np.array([0.2 * np.cos(0.7), 0.9, 0.2 * np.sin(0.7)])  # tangent: q0 . p0 = 0
    problem = dataclasses.replace(conical, q0=q0, p0=p0, exact=None, period=None)

    def lz(traj):
        return traj.q[:, 0] * traj.p[:, 1] - traj.q[:, 1] * traj.p[:, 0]

    traj = hc.integrate(problem, RATTLE(), 0.1, 100.0)
    assert np.abs(lz(traj) - lz(traj)[0]).max() <= 1e-14
    assert np.abs(traj.g()).max() <= 1e-15
    # DOP853 on the index-reduced ODE is not built to keep it
    ode = hc.integrate(problem, DOP853(1e-6), 0.1, 100.0)
    assert np.abs(lz(ode) - lz(ode)[0]).max() > 1e-9


def test_rattle_is_symmetric_and_handles_several_constraints(tethered):
    stepper = RATTLE().stepper(tethered)
    q0, p0 = tethered.q0, tethered.p0
    dq, dp, lam, it = stepper.step(q0, p0, 0.1)
    assert lam.shape == (3,) and it >= 1
    q1, p1 = q0 + dq, p0 + dp
    assert np.abs(tethered.constraint(q1[None])).max() <= 1e-14
    dq2, dp2, _, _ = RATTLE().stepper(tethered).step(q1, p1, -0.1)
    np.testing.assert_allclose(q1 + dq2, q0, atol=1e-14)
    np.testing.assert_allclose(p1 + dp2, p0, atol=1e-14)


def test_rattle_from_spec_and_bad_keys():
    assert from_spec({"method": "rattle"}).name == "RATTLE"
    with pytest.raises(hc.ConfigError, match="'k'"):
        from_spec({"method": "rattle", "k": 2})
    with pytest.raises(hc.ConfigError, match="'leapfrog'"):
        from_spec({"method": "leapfrog"})


def test_rattle_reports_a_diverging_newton_iteration(planar):
    with pytest.raises(hc.ConvergenceError, match="step"):
        hc.integrate(planar, RATTLE(), 50.0, 500.0)
