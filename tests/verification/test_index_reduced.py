"""DOP853 on the index-reduced ODE: error falls with the tolerance; projection puts g and G^T M^-1 p at round-off."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import hbvm_core as hc
from hbvm_core.methods import DOP853, method_from_entry


def _state_error(problem, traj):
    q, p, _ = problem.exact(traj.t)
    return np.abs(np.concatenate([traj.q - q, traj.p - p], axis=1)).max()


@pytest.mark.parametrize("projection", [False, True])
def test_error_falls_with_the_tolerance(planar, projection):
    # with projection the ODE restarts at every output point: use a coarse output step so the tolerance matters
    h = 0.1 if not projection else 2.0
    e = [
        _state_error(planar, hc.integrate(planar, DOP853(rtol, projection=projection), h, 20.0))
        for rtol in (1e-4, 1e-6, 1e-8, 1e-10)
    ]
    assert all(a > 5 * b for a, b in zip(e, e[1:])), e
    assert e[-1] < 1e-7


def test_unprojected_run_is_the_dense_output_of_one_integration(planar):
    """Without projection the stepper samples one continuous DOP853 solution, exactly as solve_ivp with t_eval."""
    traj = hc.integrate(planar, DOP853(1e-9), 0.1, 5.0, compensated=False)
    y0 = np.concatenate([planar.q0, planar.p0])
    ref = solve_ivp(planar.index_reduced_rhs, (0.0, 5.0), y0, method="DOP853", rtol=1e-9, atol=1e-9, t_eval=traj.t)
    np.testing.assert_allclose(traj.y()[:-1], ref.y.T[:-1], rtol=0, atol=1e-15)  # the last step differs (t_bound)
    assert traj.iterations.sum() > 0 and traj.iterations.max() < 100  # RHS evaluations per output step


def test_projection_keeps_constraints_at_roundoff_and_reports_lambda(tethered):
    traj = hc.integrate(tethered, DOP853(1e-6, projection=True), 0.5, 20.0)
    assert np.abs(traj.g()).max() <= 1e-14
    assert np.abs(traj.hidden()).max() <= 1e-14
    free = hc.integrate(tethered, DOP853(1e-6), 0.5, 20.0)
    assert np.abs(free.g()).max() > 1e-10  # the plain ODE drifts off the manifold
    # lam is the exact lambda(q_n, p_n) at the start of each output step
    np.testing.assert_allclose(traj.lam, tethered.multiplier(traj.q[:-1], traj.p[:-1]), rtol=1e-14, atol=1e-15)


def test_from_entry_and_bad_values():
    m = method_from_entry({"method": "dop853", "rtol": 1e-8, "projection": True})
    assert m.tolerances == (1e-8, 1e-8) and m.projection and m.name == "DOP853(1e-08)-proj"
    assert method_from_entry({"method": "dop853", "rtol": 1e-8, "atol": 1e-12}).attrs()["atol"] == 1e-12
    for entry, key in [
        ({"method": "dop853", "rtol": 0}, "rtol = 0"),
        ({"method": "dop853", "rtol": 1e-8, "atol": "x"}, "atol = 'x'"),
        ({"method": "dop853", "rtol": 1e-8, "projection": "yes"}, "projection = 'yes'"),
        ({"method": "dop853", "rtol": 1e-8, "k": 2}, "'k'"),
    ]:
        with pytest.raises(hc.ConfigError, match=key):
            method_from_entry(entry)
