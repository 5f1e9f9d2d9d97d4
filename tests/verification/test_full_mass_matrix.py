"""HBVM(k, s) with a full (non-diagonal) SPD mass matrix (docs/method.md sections 3 and 6): the compiled loop
of the constant multiplier against the numpy one, and the invariants to round-off for the constant and the
polynomial multiplier (whose compiled loop takes M = I only, so it runs on numpy here).

The planar pendulum with M = [[2, 0.5], [0.5, 1]] and p0 = M (1, 0) (so M^-1 p0 is tangent to the circle at
q0 = (0, -1)): H = p^T M^-1 p / 2 + y is quadratic and g = x^2 + y^2 - 1 too, so HBVM(k, s) with k >= s keeps
H exactly and the constraint to the solver's tolerance; only round-off is left. A solve by the transposed
Cholesky factor (L^T L in place of L L^T) moves q by O(1).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.methods import method_from_entry

M = np.array([[2.0, 0.5], [0.5, 1.0]])
H_STEP, T_END = 0.1, 5.0
EPS = np.finfo(float).eps


@pytest.fixture(scope="module")
def problem():
    planar = hc.get_problem("planar_pendulum")
    return dataclasses.replace(planar, M=M, p0=M @ [1.0, 0.0], exact=None)


def check_invariants(run, steps: int) -> None:
    # H and g are kept to round-off (a few eps per step on O(1) values), far below one step's error h^4 = 1e-4
    assert np.max(np.abs(run.energy_error())) <= 10 * steps * EPS
    assert np.max(np.abs(run.g())) <= 10 * steps * EPS
    # the run moves: the mass matrix is exercised (x swings away from 0)
    assert np.max(np.abs(run.q[:, 0])) > 0.3


@pytest.mark.slow  # compiles a loop of its own
def test_constant_multiplier_compiled_against_numpy(problem):
    method = method_from_entry({"k": 2, "s": 2})
    ref = hc.integrate(problem, method, H_STEP, T_END, backend="numpy")
    traj = hc.integrate(problem, method, H_STEP, T_END, backend="numba")
    assert traj.attrs["backend"] == "numba" and ref.attrs["backend"] == "numpy"
    steps = round(T_END / H_STEP)
    # two evaluation orders of the same steps: round-off of O(1) numbers growing at most linearly with the steps
    tol = 100 * steps * EPS
    for a, b in ((traj.q, ref.q), (traj.p, ref.p), (traj.lam, ref.lam)):
        assert a.shape == b.shape and np.max(np.abs(a - b)) <= tol * max(1.0, np.max(np.abs(b)))
    for run in (ref, traj):
        check_invariants(run, steps)


@pytest.mark.parametrize("backend", [pytest.param("numba", marks=pytest.mark.slow), "numpy"])  # numba compiles
def test_polynomial_multiplier_keeps_the_invariants(problem, backend):
    """The polynomial multiplier's compiled loop takes a full M too (by its Cholesky factor): both backends
    keep the invariants."""
    method = method_from_entry({"k": 4, "s": 2, "multiplier": "polynomial"})
    assert method.compiled_runner(problem) is not None
    run = hc.integrate(problem, method, H_STEP, T_END, backend=backend)
    assert run.attrs["backend"] == backend
    check_invariants(run, round(T_END / H_STEP))
