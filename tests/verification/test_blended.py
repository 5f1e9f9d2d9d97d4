"""The blended (simplified-Newton) iteration: the same trajectory as the fixed point to round-off, on
the numpy and the compiled path, and convergence at step sizes where the fixed point fails."""

from __future__ import annotations

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.errors import ConvergenceError
from hbvm_core.fixed_point import StoppingRule

CASES = [
    ("planar_pendulum", 2, 2, 0.05, 100),
    ("conical_pendulum", 2, 2, None, 100),
    ("modified_pendulum", 6, 2, 0.05, 100),
    ("tethered_satellites", 6, 2, 0.1, 100),
    ("theta_pendulum", 3, 2, 0.1, 50),
]


def close(a, b, tol=1e-12):
    for x, y in ((a.q, b.q), (a.p, b.p), (a.lam, b.lam)):
        if x.size:
            assert np.max(np.abs(x - y)) <= tol * max(1.0, np.max(np.abs(x)))


@pytest.mark.parametrize("name,k,s,h,steps", CASES, ids=[c[0] for c in CASES])
def test_blended_gives_the_fixed_point_trajectory(name, k, s, h, steps):
    pb = hc.get_problem(name)
    h = pb.period / 100 if h is None else h
    fp = hc.integrate(pb, hc.HBVM(k, s), h, steps * h, backend="numpy")
    bl = hc.integrate(pb, hc.HBVM(k, s, solver="blended"), h, steps * h, backend="numpy")
    close(fp, bl)
    assert bl.attrs["mean_iterations"] < fp.attrs["mean_iterations"]


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
@pytest.mark.parametrize("name,k,h", [("planar_pendulum", 2, 0.05), ("tethered_satellites", 6, 0.1)])
def test_compiled_blended_matches_numpy_blended(name, k, h):
    pb = hc.get_problem(name)
    a = hc.integrate(pb, hc.HBVM(k, 2, solver="blended"), h, 100 * h, backend="numpy")
    b = hc.integrate(pb, hc.HBVM(k, 2, solver="blended"), h, 100 * h, backend="numba")
    assert b.attrs["backend"] == "numba"
    close(a, b)
    # the dense LU here and the Schur-complement solve there round differently; near the stopping threshold that
    # may move a step's stop by one iteration, never more
    diff = np.abs(a.iterations.astype(int) - b.iterations.astype(int))
    assert diff.max() <= 1 and abs(a.attrs["mean_iterations"] - b.attrs["mean_iterations"]) <= 0.05
    fp = hc.integrate(pb, hc.HBVM(k, 2), h, 100 * h, backend="numba")
    close(fp, b)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=pytest.mark.slow)])  # numba compiles
def test_blended_converges_where_the_fixed_point_fails(planar, backend):
    """h = 2.5 on the planar pendulum: the fixed point diverges; the blended iteration converges, and the step
    keeps H and g (exactly conserved by HBVM(2,2) here: U linear, g quadratic) at round-off."""
    h, t_end = 2.5, 10.0
    with pytest.raises(ConvergenceError):
        hc.integrate(planar, hc.HBVM(2, 2), h, t_end, backend=backend)
    traj = hc.integrate(planar, hc.HBVM(2, 2, solver="blended"), h, t_end, backend=backend)
    assert traj.energy_error().max() <= 1e-13
    assert np.abs(traj.g()).max() <= 1e-13


def test_blended_needs_fewer_iterations_on_the_tethered_satellites(tethered):
    fp = hc.integrate(tethered, hc.HBVM(6, 2), 0.1, 10.0, backend="numpy")
    bl = hc.integrate(tethered, hc.HBVM(6, 2, solver="blended"), 0.1, 10.0, backend="numpy")
    # six sweeps on every step; round-off flips the stall test of a step by one sweep at most, rarely
    assert abs(fp.attrs["mean_iterations"] - 6.0) <= 0.1
    assert bl.attrs["mean_iterations"] <= 3.5
    close(fp, bl)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=pytest.mark.slow)])  # numba compiles
def test_blended_failure_is_reported_with_step_and_time(planar, backend):
    method = hc.HBVM(2, 2, solver="blended", rule=StoppingRule(max_iter=2))
    with pytest.raises(ConvergenceError, match="no convergence") as info:
        hc.integrate(planar, method, 0.05, 1.0, backend=backend)
    assert info.value.step == 0 and info.value.iterations == 2
