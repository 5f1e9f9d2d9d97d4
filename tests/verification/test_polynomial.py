"""The polynomial-multiplier HBVM (docs/method.md 6): measured orders, s = 1 equals HBVM(k,1), conservation."""

import numpy as np
import pytest
from _util import fitted_order, round_off

import hbvm_core as hc
from hbvm_core.kernels import Kernels, kernel
from hbvm_core.methods import HBVM, PolynomialHBVM, method_from_entry

EPS = np.finfo(float).eps


def _state_error(problem, traj):
    q, p, _ = problem.exact(traj.t)
    return np.abs(np.concatenate([traj.q - q, traj.p - p], axis=1)).max()


@pytest.mark.parametrize("k", [1, 3, 6])
def test_s1_is_the_constant_multiplier_method(planar, tethered, k):
    for problem, t_end in ((planar, 10.0), (tethered, 2.0)):
        a = hc.integrate(problem, HBVM(k, 1), 0.1, t_end, backend="numpy")
        b = hc.integrate(problem, PolynomialHBVM(k, 1), 0.1, t_end, backend="numpy")
        steps = len(a.lam)
        # two evaluation orders of the same formulas: each step may add a rounding of each quantity's scale
        for x, y in ((a.q, b.q), (a.p, b.p), (a.lam, b.lam)):
            assert np.abs(x - y).max() <= steps * EPS * max(1.0, np.abs(x).max())


#: (s, expected order, step sizes): plain order 2 ceil(s/2), projected order 2s (docs/method.md 6).
PLAIN = [(1, 2), (2, 2), (3, 4), (4, 4)]
PROJECTED = [(1, 2), (2, 4), (3, 6), (4, 8)]


@pytest.mark.parametrize("s,order", PLAIN)
def test_plain_order_is_2_ceil_s_over_2(planar, s, order):
    hs = [0.2, 0.1, 0.05, 0.025]
    e = [_state_error(planar, hc.integrate(planar, PolynomialHBVM(s + 2, s), h, 2.0, backend="numpy")) for h in hs]
    assert abs(fitted_order(hs, e) - order) < 0.3, e


@pytest.mark.parametrize("s,order", PROJECTED)
def test_projected_order_is_2s(planar, s, order):
    hs = {3: [0.4, 0.2, 0.1, 0.05], 4: [0.5, 0.25, 0.125]}.get(s, [0.2, 0.1, 0.05, 0.025])
    e = [
        _state_error(planar, hc.integrate(planar, PolynomialHBVM(2 * s, s, projection=True), h, 2.0, backend="numpy"))
        for h in hs
    ]
    assert min(e) > 1e-13  # above round-off, so the slope is the order
    assert abs(fitted_order(hs, e) - order) < 0.3, e


def test_lambda_reported_at_the_step_start(planar):
    """lam_n = sum_i P_i(0) lambda_i approximates lambda(t_n) to order s with the projection."""
    hs = [0.2, 0.1, 0.05]
    e = []
    for h in hs:
        traj = hc.integrate(planar, PolynomialHBVM(6, 3, projection=True), h, 2.0, backend="numpy")
        e.append(np.abs(traj.lam - planar.exact(traj.tstep)[2]).max())
    assert fitted_order(hs, e) > 2.7


@pytest.mark.parametrize("projection", [False, True])
def test_energy_and_constraints_at_roundoff(tethered, modified, projection):
    # tethered: quadratic g; modified: degree-6 polynomials, exact with k = 3s (docs/method.md 6)
    for problem, k, s in ((tethered, 6, 3), (modified, 9, 3)):
        traj = hc.integrate(problem, PolynomialHBVM(k, s, projection=projection), 0.1, 5.0, backend="numpy")
        if problem is modified:
            assert traj.energy_error().max() <= 1e-14
        assert np.abs(traj.g()).max() <= 1e-13
        if projection:
            assert np.abs(traj.hidden()).max() <= 1e-14
            assert traj.energy_error().max() <= 1e-13


def test_plain_step_is_symmetric(tethered):
    method = PolynomialHBVM(6, 3, warm_start="p0")
    q0, p0 = tethered.q0, tethered.p0
    dq, dp, _, _ = method.stepper(tethered).step(q0, p0, 0.1)
    dq2, dp2, _, _ = method.stepper(tethered).step(q0 + dq, p0 + dp, -0.1)
    np.testing.assert_allclose(q0 + dq + dq2, q0, atol=1e-14)
    np.testing.assert_allclose(p0 + dp + dp2, p0, atol=1e-14)


def test_method_from_entry():
    m = method_from_entry({"k": 6, "s": 3, "multiplier": "polynomial", "projection": True})
    assert isinstance(m, PolynomialHBVM) and m.projection and m.name == "HBVM(6,3)-poly-proj"
    assert m.attrs()["multiplier"] == "polynomial"
    assert isinstance(method_from_entry({"k": 6, "s": 2, "multiplier": "constant"}), HBVM)
    for entry, key in [
        ({"k": 6, "s": 2, "projection": True}, "projection = True"),
        ({"k": 6, "s": 2, "multiplier": "linear"}, "multiplier = 'linear'"),
        ({"k": 6, "s": 2, "multiplier": "polynomial", "solver": "blended"}, "solver = 'blended'"),
        ({"k": 2, "s": 3, "multiplier": "polynomial"}, "k = 2"),
        ({"k": 6, "s": 2, "multiplier": "polynomial", "projection": 1}, "projection = 1"),
    ]:
        with pytest.raises(hc.ConfigError, match=key):
            method_from_entry(entry)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["planar_pendulum", "tethered_satellites"])
def test_compiled_loop_agrees_with_numpy(name):
    """The numba loop (polynomial_kernel) does the numpy stepper's arithmetic: same points to round-off."""
    problem = hc.get_problem(name)
    for method in (PolynomialHBVM(6, 3, projection=True), PolynomialHBVM(4, 2)):
        a = hc.integrate(problem, method, 0.1, 10.0, backend="numba", save_every=3, chunk=7)
        b = hc.integrate(problem, method, 0.1, 10.0, backend="numpy", save_every=3, chunk=7)
        assert a.attrs["backend"] == "numba" and b.attrs["backend"] == "numpy"
        steps = len(b.iterations)
        # the same arithmetic in two code paths: a rounding of each quantity's scale per step at most
        assert np.abs(a.t - b.t).max() <= round_off(steps, b.t.max()) and len(a.tstep) == len(b.tstep)
        assert np.abs(a.tstep - b.tstep).max() <= round_off(steps, b.t.max())
        assert np.abs(a.y() - b.y()).max() <= round_off(steps, np.abs(b.y()).max(), per_step=4)
        assert np.abs(a.lam - b.lam).max() <= 1e-11 * (1.0 + np.abs(b.lam).max())
        assert abs(a.attrs["mean_iterations"] - b.attrs["mean_iterations"]) <= 0.2


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_diverging_iteration_is_reported_with_step_and_time(planar, backend):
    with pytest.raises(hc.ConvergenceError, match="step 0 ") as err:
        hc.integrate(planar, PolynomialHBVM(4, 2, projection=True), 20.0, 200.0, backend=backend)
    assert err.value.step == 0 and err.value.t == 0.0


def test_projection_keeps_energy_at_roundoff_over_long_runs(planar):
    """The projection written as an increment to p0: no linear drift of H at round-off level.

    (Rescaling the rounded p0 + dp instead drifted to ~1e-13 in these 4000 steps and ~3e-12 in 10^5.)
    """
    traj = hc.integrate(planar, PolynomialHBVM(6, 3, projection=True), 0.1, 400.0, backend="numpy")
    assert traj.energy_error().max() <= 2e-14
    assert np.abs(traj.hidden()).max() <= 1e-15


# A particle on the unit circle under gravity, with the full SPD mass matrix M_FULL (M != I, not diagonal):
# U = q_2, g = (|q|^2 - 1) / 2, G = q; the compiled callbacks are importable by name (cached loop).
M_FULL = np.array([[2.0, 0.5], [0.5, 1.0]])


@kernel
def circle_grad_U(Q, out, params):
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 1.0


@kernel
def circle_G(Q, out, params):
    for i in range(Q.shape[0]):
        out[i, 0, 0] = Q[i, 0]
        out[i, 1, 0] = Q[i, 1]


def circle_with_full_mass() -> hc.Problem:
    q0 = np.array([np.sin(1.0), -np.cos(1.0)])
    v0 = 0.8 * np.array([np.cos(1.0), np.sin(1.0)])  # tangent: G(q0)^T M^{-1} p0 = q0 . v0 = 0
    return hc.Problem(
        name="circle_full_mass",
        U=lambda Q: Q[:, 1],
        grad_U=lambda Q: np.tile([0.0, 1.0], (Q.shape[0], 1)),
        g=lambda Q: 0.5 * (np.sum(Q * Q, axis=1, keepdims=True) - 1.0),
        G=lambda Q: Q[:, :, None],
        q0=q0,
        p0=M_FULL @ v0,
        M=M_FULL,
        kernels=Kernels(grad_U=circle_grad_U, G=circle_G),
    )


@pytest.mark.slow
def test_compiled_loop_with_a_full_mass_matrix_agrees_with_numpy_and_conserves():
    """M = [[2, .5], [.5, 1]]: the compiled loop (M^{-1} by its Cholesky factor) against the numpy stepper
    (scipy's cho_solve), and H, g conserved to round-off on both paths."""
    problem = circle_with_full_mass()
    eps, N = np.finfo(float).eps, 100
    for method in (PolynomialHBVM(6, 3, projection=True), PolynomialHBVM(4, 2)):
        a = hc.integrate(problem, method, 0.1, 0.1 * N, backend="numba", save_every=3, chunk=7)
        b = hc.integrate(problem, method, 0.1, 0.1 * N, backend="numpy", save_every=3, chunk=7)
        assert a.attrs["backend"] == "numba" and b.attrs["backend"] == "numpy"
        np.testing.assert_array_equal(a.t, b.t)
        np.testing.assert_array_equal(a.tstep, b.tstep)
        # two orders of evaluation (plain substitution vs LAPACK, loops vs matmul) differ by a few ulps of the
        # state per step, and these add up over the N steps: 10 eps per step of the state's scale
        scale = 1.0 + np.abs(b.y()).max()
        assert np.abs(a.y() - b.y()).max() <= 10 * N * eps * scale
        # lambda solves a small system conditioned like A (cond ~ 1/h): 1e3 eps per step of its scale
        assert np.abs(a.lam - b.lam).max() <= 1e3 * N * eps * (1.0 + np.abs(b.lam).max())
        assert abs(a.attrs["mean_iterations"] - b.attrs["mean_iterations"]) <= 0.2
        for traj in (a, b):
            # quadratic g with k >= 2s is kept to round-off (docs/method.md 6): a few eps per step of |q|^2 = 1
            assert np.abs(traj.g()).max() <= 10 * N * eps
            if method.projection:  # the energy-preserving projection: H to round-off of its scale (|H| ~ 1)
                assert traj.energy_error().max() <= 10 * N * eps


@pytest.mark.slow
def test_compiled_loop_with_a_diagonal_mass_matrix_agrees_with_numpy():
    """M = diag(m1, m1, m2, m2) (the double pendulum): the compiled loop's diagonal Cholesky factor against
    the numpy stepper's division by the diagonal, to an eps-scaled tolerance (as above)."""
    from test_kernels import compiled_double_pendulum

    pb = compiled_double_pendulum(m1=1.0, m2=2.0)
    eps, N = np.finfo(float).eps, 60
    a = hc.integrate(pb, PolynomialHBVM(4, 2, projection=True), 0.05, 0.05 * N, backend="numba")
    b = hc.integrate(pb, PolynomialHBVM(4, 2, projection=True), 0.05, 0.05 * N, backend="numpy")
    assert a.attrs["backend"] == "numba"
    scale = 1.0 + np.abs(b.y()).max()
    assert np.abs(a.y() - b.y()).max() <= 10 * N * eps * scale  # as above: a few ulps per step
    # H conserved by the projection, to round-off of its scale
    assert a.energy_error().max() <= 10 * N * eps * max(1.0, abs(a.H()[0]))
