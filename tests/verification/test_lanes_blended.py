"""Lockstep blocks of the blended solver (``kernels/lanes.py``'s ``BLENDED_ITERATION``: the simplified Newton
iteration of docs/method.md 3, its bordered system (B2) solved in each lane by ``linalg.solve_small``) against
their oracles: the per-run block (HBVM_LANES=0) and the per-run compiled loop (``hbvm_core.integrate``), which
factorise A11 once a step and solve by its Schur complement. The lanes differ in params and M (diagonal, full);
each run starts from its own lambda(q0, p0). H and g are conserved to round-off: HBVM(k, s) with k >= s on
problems whose H and g are of degree 2 (docs/method.md 3). The conical pendulum over length and gravity by
either solver: test_lanes_params."""

from __future__ import annotations

import numpy as np
import pytest
from test_lanes_params import against_per_run_block, assert_close, assert_conserved
from user_problems import RODS_IN_SPACE

import hbvm_core as hc
from hbvm_core.kernels import lanes
from hbvm_core.kernels.rules import OK
from hbvm_core.problems.parametric import conical_pendulum


@pytest.mark.slow
def test_rods_in_space_with_a_mass_matrix_over_l1_and_grav(monkeypatch):
    """The formula problem of two masses on rods in space (m = 6, nu = 3: a bordered system of 15 unknowns,
    M = diag(m1 x3, m2 x3)) over l1 (q0, g; across l2 = 0.7, so that lanes pivot differently) and grav (U), and
    m2 (U and M: the lanes' diagonal M differ)."""
    from hbvm_core.expressions import factory

    build = factory(RODS_IN_SPACE)
    method, N, h = hc.HBVM(4, 2, solver="blended"), 60, 0.01
    R = 2 * lanes.LANES + 3
    values = {
        "l1": np.linspace(0.5, 1.5, R),
        "grav": 9.81 * (1.0 + 0.5 * np.sin(np.arange(R))),
        "m2": np.linspace(1.0, 3.0, R)[::-1].copy(),
    }

    def run():
        return hc.integrate_ensemble(build(), method, h, N, params=values, sample_every=10)

    lock = against_per_run_block(monkeypatch, run, N, sweeps_apart=1)
    assert np.all(lock.status == OK)
    assert lock.backend_note == (
        f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (3 of a params row per lane; M != I per lane, "
        "diagonal)"
    )
    runs = [build(**{key: float(val[r]) for key, val in values.items()}) for r in range(R)]
    assert_conserved(lock, runs, N)
    for r in (0, R // 2, R - 1):
        one = hc.integrate(runs[r], method, h, h * N, save_every=10, backend="numba")
        for key in ("q", "p"):
            assert_close(getattr(lock, key)[r], getattr(one, key), N, f"{key} of run {r}")


def full_mass(a: float, c: float) -> np.ndarray:
    """A full M coupling x and z (y alone, so that M^-1 p0 stays tangent for the conical pendulum's p0 along y)."""
    return np.array([[2.0 * a, 0.0, c], [0.0, 1.5 * a, 0.0], [c, 0.0, a]])


@pytest.mark.slow
def test_full_mass_matrix_per_run(monkeypatch):
    """Conical pendula of different gravities, each with a full M of its own (M^-1 in the lanes, K0's included,
    is ``linalg.minv`` rewritten): every run is the per-run block's, the first and last their own loop's."""
    import dataclasses

    method, N = hc.HBVM(2, 2, solver="blended"), 30
    R = lanes.MIN_GROUP + 2
    runs = [
        dataclasses.replace(conical_pendulum(length=1.5, gravity=0.8 + 0.1 * r), M=full_mass(1.0 + 0.1 * r, 0.3))
        for r in range(R)
    ]
    h = 0.03 * (1.0 + 0.1 * np.arange(R) / R)

    def run():
        return hc.integrate_ensemble(runs, method, h, N, sample_every=5)

    lock = against_per_run_block(monkeypatch, run, N, sweeps_apart=1)
    assert np.all(lock.status == OK)
    assert lock.backend_note == (
        f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (1 of a params row per lane; M != I per lane, full)"
    )
    assert_conserved(lock, runs, N)
    for r in (0, R - 1):
        one = hc.integrate(runs[r], method, h[r], h[r] * N, save_every=5, backend="numba")
        n = one.q.shape[0]
        for key in ("q", "p"):
            assert_close(getattr(lock, key)[r, :n], getattr(one, key), N, f"{key} of run {r}")
