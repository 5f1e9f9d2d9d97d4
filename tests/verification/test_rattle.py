"""RATTLE baseline: second order, symplectic, constraints to round-off, quadratic invariants conserved."""

import dataclasses

import numpy as np
import pytest
from _util import fitted_order

import hbvm_core as hc
from hbvm_core.kernels import kernel
from hbvm_core.methods import DOP853, HBVM, RATTLE, method_from_entry
from hbvm_core.problems.pendulum import theta_to_planar

#: the unit round-off of float64
EPS = np.finfo(float).eps


def _state_error(problem, traj):
    q, p, lam = problem.exact(traj.t)
    return np.abs(np.concatenate([traj.q - q, traj.p - p], axis=1)).max()


def test_rattle_is_second_order_with_constraints_at_roundoff(planar):
    hs = [0.1, 0.05, 0.025, 0.0125]
    e_s, e_lam = [], []
    for h in hs:
        traj = hc.integrate(planar, RATTLE(), h, 10.0, backend="numpy")  # the compiled loop: test_compiled_rattle_*
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


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
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


def test_rattle_from_entry_and_bad_keys():
    assert method_from_entry({"method": "rattle"}).name == "RATTLE"
    with pytest.raises(hc.ConfigError, match="'k'"):
        method_from_entry({"method": "rattle", "k": 2})
    with pytest.raises(hc.ConfigError, match="'leapfrog'"):
        method_from_entry({"method": "leapfrog"})


@pytest.mark.slow  # compiles the loop (the numpy path alone: test_rattle_is_second_order_*)
def test_rattle_reports_a_diverging_newton_iteration(planar):
    messages = []
    for backend in ("numpy", "numba"):
        with pytest.raises(hc.ConvergenceError, match="step") as info:
            hc.integrate(planar, RATTLE(), 50.0, 500.0, backend=backend)
        messages.append((info.value.step, info.value.reason))
    assert messages[0] == messages[1]  # the compiled loop fails at the same step for the same reason


@pytest.mark.slow  # compiles the loops
@pytest.mark.parametrize(
    "name", ["planar_pendulum", "tethered_satellites", "theta_pendulum", "conical_pendulum", "modified_pendulum"]
)
def test_compiled_rattle_equals_the_numpy_rattle(name):
    """The compiled loop (kernels/rattle.py) repeats RattleStepper.step to round-off, multiplier included."""
    problem = hc.get_problem(name)
    ref = hc.integrate(problem, RATTLE(), 0.05, 5.0, backend="numpy", save_every=4)
    traj = hc.integrate(problem, RATTLE(), 0.05, 5.0, backend="numba", save_every=4)
    assert traj.attrs["backend"] == "numba" and ref.attrs["backend"] == "numpy"
    assert traj.t.shape == ref.t.shape
    # both paths compute t_n = n h (compensated): a rounding of t_end per step at most
    np.testing.assert_allclose(traj.t, ref.t, rtol=0, atol=len(traj.lam) * EPS * ref.t[-1])
    np.testing.assert_allclose(traj.q, ref.q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(traj.p, ref.p, rtol=0, atol=1e-13)
    # lam comes from g(q1) = 0 through q1 = qfree - h^2/2 M^-1 G lam: q's round-off over h^2/2 = 1.25e-3
    np.testing.assert_allclose(traj.lam, ref.lam, rtol=0, atol=1e-13 / 1.25e-3)
    assert abs(traj.attrs["mean_iterations"] - ref.attrs["mean_iterations"]) <= 0.05
    if problem.nu:
        assert np.abs(traj.g()).max() <= 1e-14


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
def test_compiled_rattle_with_a_mass_matrix(planar):
    """M != I (a diagonal M = 2 I, and a full SPD M): the Cholesky path of the loop agrees with numpy's."""
    full = np.array([[2.0, 0.5], [0.5, 1.0]])
    for M in (2.0 * np.eye(2), full):
        # p0 = M (1, 0): M^-1 p0 is tangent to the circle at q0 = (0, -1)
        problem = dataclasses.replace(planar, M=M, p0=M @ [1.0, 0.0], exact=None)
        ref = hc.integrate(problem, RATTLE(), 0.1, 5.0, backend="numpy")
        traj = hc.integrate(problem, RATTLE(), 0.1, 5.0, backend="numba")
        np.testing.assert_allclose(traj.q, ref.q, rtol=0, atol=1e-13)
        np.testing.assert_allclose(traj.p, ref.p, rtol=0, atol=1e-13)
        assert np.abs(traj.hidden()).max() <= 1e-14


@kernel
def twice_g(Q, out, params):
    """2 (x^2 + y^2 - 1): zero where the planar pendulum's g is, but not its g."""
    for i in range(Q.shape[0]):
        out[i, 0] = 2.0 * (Q[i, 0] * Q[i, 0] + Q[i, 1] * Q[i, 1] - 1.0)


def test_compiled_rattle_checks_its_constraint_kernel(planar):
    """A compiled g that disagrees with the numpy g is refused, as for grad_U and G."""
    # built without the construction-time checks (which refuse it too), so that RATTLE's own check is what refuses it
    problem = dataclasses.replace(
        planar, kernels=dataclasses.replace(planar.kernels, g=f"{__name__}:twice_g"), check_derivatives=False
    )
    with pytest.raises(hc.ProblemError, match="kernels.g disagrees"):
        hc.integrate(problem, RATTLE(), 0.1, 1.0)
    without = dataclasses.replace(planar, kernels=dataclasses.replace(planar.kernels, g=None))
    assert RATTLE().compiled_runner(without) is None  # no compiled g: the numpy RATTLE
    assert hc.integrate(without, RATTLE(), 0.1, 1.0).attrs["backend"] == "numpy"
