"""Lockstep blocks of the blended solver (``kernels/lanes.py``'s ``BLENDED_ITERATION``: the simplified Newton
iteration of docs/method.md 3, its bordered system (B2) solved in each lane by ``linalg.solve_small``) against
their oracles: the per-run block (HBVM_LANES=0) and the per-run compiled loop (``hbvm_core.integrate``), which
factorise A11 once a step and solve by its Schur complement. The lanes differ in params and M (diagonal, full);
each run starts from its own lambda(q0, p0). H and g are conserved to round-off: HBVM(k, s) with k >= s on
problems whose H and g are of degree 2 (docs/method.md 3)."""

from __future__ import annotations

import numpy as np
import pytest
from user_problems import RODS_IN_SPACE

import hbvm_core as hc
from hbvm_core.kernels import lanes
from hbvm_core.kernels.rules import OK
from hbvm_core.problems.parametric import conical_pendulum

#: the unit round-off of float64
EPS = np.finfo(float).eps


def assert_close(x, y, steps, what):
    """x equals y to eps times their scale times the steps: each step solves the same system (B2) to round-off
    (the bordered LU here, the Schur complement of A11 there), and the rounding of a step carries into the next."""
    assert x.shape == y.shape, what
    scale = max(1.0, float(np.max(np.abs(np.nan_to_num(y)), initial=0.0)))
    assert np.array_equal(np.isnan(x), np.isnan(y)), what
    assert np.max(np.abs(np.nan_to_num(x) - np.nan_to_num(y)), initial=0.0) <= 8 * EPS * scale * max(steps, 1), what


def against_per_run_block(monkeypatch, run, steps):
    """``run()`` in lockstep and by the per-run block (HBVM_LANES=0): the same statuses, steps and saved points,
    the values to round-off, the iteration counts to a sweep at a few steps; returns the lockstep result.

    The counts may differ where a step's increments reach round-off: the stall rule (d >= d_prev at d <= stall
    scale, ``rules.converged``) then decides on the rounding, which the two solves of (B2) leave different (a
    first run: one sweep more or less at 2 of 1200 run-steps)."""
    lock = run()
    monkeypatch.setenv("HBVM_LANES", "0")
    ref = run()
    monkeypatch.delenv("HBVM_LANES")
    assert "HBVM_LANES=0" in ref.backend_note
    for key in ("status", "fail_step", "steps", "n_saved"):
        np.testing.assert_array_equal(getattr(lock, key), getattr(ref, key), err_msg=key)
    assert np.all(np.abs(lock.max_iterations - ref.max_iterations) <= 1)
    differ = np.abs(lock.iterations - ref.iterations)
    assert np.sum(differ) <= 0.01 * np.sum(ref.steps), (lock.iterations, ref.iterations)
    for key in ("t", "q", "p", "lam", "H_error", "g_error"):
        assert_close(getattr(lock, key), getattr(ref, key), steps, key)
    return lock


def assert_conserved(result, runs, steps):
    """H and g of every run to round-off: eps times the scale of H (and of the state, for g) times the steps."""
    for r, pb in enumerate(runs):
        n = int(result.n_saved[r])
        q, p = result.q[r, :n], result.p[r, :n]
        scale = max(1.0, float(np.max(np.abs(pb.hamiltonian(q, p)))), float(np.max(q**2)))
        assert 0.0 <= result.H_error[r] <= 8 * EPS * scale * steps, (r, result.H_error[r])
        assert np.all(result.g_error[r] <= 8 * EPS * scale * steps), (r, result.g_error[r])


@pytest.mark.slow
def test_conical_pendulum_over_length_and_gravity(monkeypatch):
    """A grid of lengths (q0, g) and gravities (U) with the blended solver, and a block of one params row among
    them: every run is the per-run block's and, for a few, its own per-run compiled loop's."""
    method, N = hc.HBVM(2, 2, solver="blended"), 40
    lengths, gravities = np.meshgrid(np.linspace(0.6, 2.0, 5), np.linspace(0.5, 2.5, 4))
    length = np.r_[lengths.ravel(), np.full(lanes.LANES, 1.5)]
    gravity = np.r_[gravities.ravel(), np.full(lanes.LANES, 1.2)]
    R = length.size
    h = 0.04 * (1.0 + 0.2 * np.arange(R) / R)
    every = 1 + np.arange(R) % 6
    params = {"length": length, "gravity": gravity}

    def run():
        return hc.integrate_ensemble(conical_pendulum(), method, h, N, params=params, sample_every=every)

    lock = against_per_run_block(monkeypatch, run, N)
    assert np.all(lock.status == OK)
    assert lock.backend_note == (
        f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (1 of one params row; 2 of a params row per lane)"
    )
    runs = [conical_pendulum(length=float(length[r]), gravity=float(gravity[r])) for r in range(R)]
    assert_conserved(lock, runs, N)
    for r in (0, 7, 19, R - 1):
        one = hc.integrate(runs[r], method, float(h[r]), float(h[r]) * N, save_every=int(every[r]), backend="numba")
        n = int(lock.n_saved[r])
        assert n == one.t.size
        for key in ("q", "p"):
            assert_close(getattr(lock, key)[r, :n], getattr(one, key), N, f"{key} of run {r}")
        assert_close(lock.lam[r], one.lam[-1], N, f"lam of run {r}")


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

    lock = against_per_run_block(monkeypatch, run, N)
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

    lock = against_per_run_block(monkeypatch, run, N)
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
