"""Symmetry, conservation and iteration counts (docs/method.md section 3, properties)."""

import numpy as np
import pytest

import hbvm_core as hc


@pytest.mark.parametrize(
    "name,k,s,h",
    [
        ("planar_pendulum", 2, 2, 0.1),
        ("planar_pendulum", 4, 2, 0.2),
        ("tethered_satellites", 6, 3, 0.1),
        ("modified_pendulum", 6, 2, 0.1),
        ("theta_pendulum", 3, 2, 0.3),
    ],
)
def test_step_is_symmetric(name, k, s, h):
    problem = hc.get_problem(name)
    method = hc.HBVM(k, s, warm_start="p0")
    q0, p0 = problem.q0, problem.p0
    dq, dp, lam, _ = method.stepper(problem).step(q0, p0, h)
    q1, p1 = q0 + dq, p0 + dp
    dq2, dp2, lam2, _ = method.stepper(problem).step(q1, p1, -h)
    np.testing.assert_allclose(q1 + dq2, q0, atol=2e-15)
    np.testing.assert_allclose(p1 + dp2, p0, atol=2e-15)


@pytest.mark.parametrize(
    "name,k,s,h,t_end",
    [
        ("planar_pendulum", 1, 1, 0.1, 10.0),
        ("planar_pendulum", 3, 3, 0.05, 10.0),
        ("conical_pendulum", 2, 2, 0.1, 20.0),
        ("modified_pendulum", 3, 1, 0.1, 10.0),
        ("modified_pendulum", 6, 2, 0.1, 10.0),
        ("modified_pendulum", 9, 3, 0.1, 10.0),
        ("tethered_satellites", 6, 2, 0.1, 10.0),
        ("tethered_satellites", 6, 3, 0.1, 10.0),
    ],
)
def test_energy_and_constraints_conserved_to_roundoff(name, k, s, h, t_end):
    problem = hc.get_problem(name)
    traj = hc.integrate(problem, hc.HBVM(k, s), h, t_end, backend="numpy")  # the method's property
    assert traj.energy_error().max() <= 1e-13
    assert np.abs(traj.g()).max() <= 1e-13


def test_modified_pendulum_needs_k_3s_for_exact_conservation(modified):
    """With k = s the degree-6 constraint is not integrated exactly: |g| is far above round-off."""
    traj = hc.integrate(modified, hc.HBVM(2, 2), 0.1, 10.0, backend="numpy")
    assert np.abs(traj.g()).max() > 1e-10


def test_hidden_constraint_is_second_order(planar):
    e = [
        np.abs(hc.integrate(planar, hc.HBVM(2, 2), h, 5.0, backend="numpy").hidden()).max() for h in (0.1, 0.05, 0.025)
    ]
    assert 1.8 < np.log2(e[0] / e[1]) < 2.2 and 1.8 < np.log2(e[1] / e[2]) < 2.2


def test_iterations_per_step_match_method_md(tethered, conical):
    """docs/method.md: about 6 sweeps per step for the tethered problem at h = 0.1, 6-12 for the conical one."""
    traj = hc.integrate(tethered, hc.HBVM(6, 2), 0.1, 10.0, backend="numpy")
    assert 4 <= traj.attrs["mean_iterations"] <= 8
    assert traj.iterations.shape == (100,) and traj.iterations.min() >= 1
    traj = hc.integrate(conical, hc.HBVM(2, 2), conical.period / 100, 10 * conical.period, backend="numpy")
    assert 4 <= traj.attrs["mean_iterations"] <= 12


@pytest.mark.slow  # 10^4 steps: the compiled loop's, which compiles
def test_compensated_summation_keeps_energy_at_one_ulp(conical):
    traj = hc.integrate(conical, hc.HBVM(2, 2), conical.period / 100, 100 * conical.period, compensated=True)
    assert traj.energy_error().max() <= 4 * np.finfo(float).eps


def test_save_every_keeps_every_nth_point_and_the_end(planar):
    full = hc.integrate(planar, hc.HBVM(2, 2), 0.1, 2.3, backend="numpy")
    sparse = hc.integrate(planar, hc.HBVM(2, 2), 0.1, 2.3, save_every=5, chunk=2, backend="numpy")
    np.testing.assert_allclose(sparse.t, full.t[[0, 5, 10, 15, 20, 23]], atol=1e-14)
    np.testing.assert_array_equal(sparse.q, full.q[[0, 5, 10, 15, 20, 23]])
    np.testing.assert_array_equal(sparse.lam, full.lam[[0, 5, 10, 15, 20]])
    assert sparse.attrs["mean_iterations"] == full.attrs["mean_iterations"]
