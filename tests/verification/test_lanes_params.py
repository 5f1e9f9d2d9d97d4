"""Lockstep blocks whose lanes differ in params and M (``hbvm_core.kernels.lanes``, ``lane_callbacks``) against
their oracles: the per-run compiled loop (``hbvm_core.integrate``) and the per-run block (HBVM_LANES=0), on the
conical pendulum over length and gravity, a formula problem with M != I over params in U, g, q0 and M, and a full
M per run with a callback that is called lane by lane; and the per-point form of the callbacks against the
callbacks themselves, point by point."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from user_problems import DOUBLE_PENDULUM_FORMULAS, RODS_IN_SPACE

import hbvm_core as hc
from hbvm_core.kernels import kernel, lanes
from hbvm_core.kernels.lane_callbacks import per_point, reads_params
from hbvm_core.kernels.registry import resolve_callback
from hbvm_core.kernels.rules import OK
from hbvm_core.problems import parametric, spherical, tethered
from hbvm_core.problems.parametric import conical_pendulum

#: the unit round-off of float64
EPS = np.finfo(float).eps
#: a formula problem (docs/problems.md's double pendulum): M = diag(m1, m1, m2, m2), l1 in q0 and g, m2 and grav
#: in U, m2 in M
DOUBLE = {**DOUBLE_PENDULUM_FORMULAS, "name": "double_pendulum_lanes"}


def assert_close(x, y, steps, what):
    """x equals y to eps times their scale times the steps: the same operations of the template's step in the
    same order, whose rounding may differ only through the compiled code (never asserted bit for bit)."""
    assert x.shape == y.shape, what
    scale = max(1.0, float(np.max(np.abs(np.nan_to_num(y)), initial=0.0)))
    assert np.array_equal(np.isnan(x), np.isnan(y)), what
    assert np.max(np.abs(np.nan_to_num(x) - np.nan_to_num(y)), initial=0.0) <= 8 * EPS * scale * max(steps, 1), what


def against_per_run_block(monkeypatch, run, steps, sweeps_apart: int = 0):
    """``run()`` in lockstep and by the per-run block (HBVM_LANES=0): the same statuses, steps and saved points,
    the values to round-off, the iteration counts equal, or (``sweeps_apart`` > 0) to that many sweeps at a run's
    worst step and within 1% of the steps over all; returns the lockstep result.

    The blended solver's counts may differ where a step's increments reach round-off: the stall rule (d >= d_prev
    at d <= stall scale, ``rules.converged``) then decides on the rounding, which the two solves of (B2) leave
    different (a first run: one sweep more or less at 2 of 1200 run-steps)."""
    lock = run()
    monkeypatch.setenv("HBVM_LANES", "0")
    ref = run()
    monkeypatch.delenv("HBVM_LANES")
    assert "HBVM_LANES=0" in ref.backend_note
    for key in ("status", "fail_step", "steps", "n_saved"):
        np.testing.assert_array_equal(getattr(lock, key), getattr(ref, key), err_msg=key)
    assert np.all(np.abs(lock.max_iterations - ref.max_iterations) <= sweeps_apart)
    differ = np.abs(lock.iterations - ref.iterations)
    assert np.sum(differ) <= (0.01 * np.sum(ref.steps) if sweeps_apart else 0), (lock.iterations, ref.iterations)
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


# --------------------------------------------------------------------------- the per-point callbacks (quick)
@kernel
def sliced_grad_U(Q, out, params):
    """U = gravity z, its gravity read through a slice of params: no per-point form (called lane by lane)."""
    gravity = params[0:1]
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 0.0
        out[i, 2] = gravity[0]


def _callbacks():
    from hbvm_core.expressions import factory

    formula = factory(DOUBLE)().kernels
    return {
        "conical grad_U": (parametric.conical_grad_U_kernel, 3, 0, 2),
        "tethered grad_U": (parametric.tethered_grad_U_kernel, 9, 0, 4),
        "formula grad_U": (formula.grad_U, 4, 0, 5),
        "formula G": (formula.G, 4, 2, 5),
    }


@pytest.mark.parametrize("name", ["conical grad_U", "tethered grad_U", "formula grad_U", "formula G"])
def test_per_point_form_is_the_callback_at_each_points_params(name):
    """The per-point form on n points with a params row each equals the callback itself run point by point with
    that point's row (plain Python on both sides: nothing compiles)."""
    f, m, nu, P = _callbacks()[name]
    f = resolve_callback("grad_U", f)[0]
    rng = np.random.default_rng(3)
    n = 7
    Q = rng.uniform(0.5, 1.5, (n, m))
    K = rng.uniform(0.5, 2.0, (n, P))
    shape = (n, m, nu) if nu else (n, m)
    out = np.zeros(shape)
    per_point(f)(Q, out, K)
    for i in range(n):
        one = np.zeros((1, *shape[1:]))
        f.py_func(Q[i : i + 1], one, K[i])
        np.testing.assert_allclose(out[i], one[0], rtol=4 * EPS, atol=0, err_msg=f"{name}: point {i}")


@kernel
def scaled_by_first_point(Q, out, params):
    """out = params[0] Q[0, 0] at every point: its params statement reads Q, so it cannot move into the loop."""
    c = params[0] * Q[0, 0]
    for i in range(Q.shape[0]):
        out[i, 0] = c


def test_callbacks_without_a_per_point_form_or_without_params():
    """A callback that reads params other than as params[j], or in a statement that also reads an array, has no
    per-point form (it is called lane by lane); one that reads no params needs none."""
    for f in (sliced_grad_U, scaled_by_first_point):
        f = resolve_callback("grad_U", f)[0]
        assert reads_params(f) and per_point(f) is None, f
    for f in (spherical.sphere_G_kernel, tethered.G_kernel):
        assert not reads_params(resolve_callback("G", f)[0])
    assert reads_params(resolve_callback("grad_U", parametric.conical_grad_U_kernel)[0])


# --------------------------------------------------------------------------- lockstep against the per-run loops
@pytest.mark.slow
@pytest.mark.parametrize("solver", ["fixed-point", "blended"])
def test_conical_pendulum_over_length_and_gravity(monkeypatch, solver):
    """A grid of lengths (q0, g) and gravities (U) as arrays, with a block of one params row among them, by either
    solver: every run is the per-run block's and its own per-run compiled loop's (a few, run by run); H and g at
    round-off."""
    method, N = hc.HBVM(2, 2, solver=solver), 40
    lengths, gravities = np.meshgrid(np.linspace(0.6, 2.0, 5), np.linspace(0.5, 2.5, 4))
    length = np.r_[lengths.ravel(), np.full(lanes.LANES, 1.5)]
    gravity = np.r_[gravities.ravel(), np.full(lanes.LANES, 1.2)]
    R = length.size
    h = 0.04 * (1.0 + 0.2 * np.arange(R) / R)
    every = 1 + np.arange(R) % 6
    params = {"length": length, "gravity": gravity}

    def run():
        return hc.integrate_ensemble(conical_pendulum(), method, h, N, params=params, sample_every=every)

    lock = against_per_run_block(monkeypatch, run, N, sweeps_apart=1 if solver == "blended" else 0)
    assert np.all(lock.status == OK)
    assert lock.backend_note == (  # 20 rows of one run each and a row of 16: 1 block of one row, 2 whose lanes differ
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
def test_formula_problem_with_a_mass_matrix_over_its_params(monkeypatch):
    """The double pendulum from formulas over l1 (q0, g), m2 (U and M) and grav (U): the lanes differ in params and
    in their diagonal M; every run is the per-run block's, and a few their own per-run compiled loop's. Where
    l1 < l2 the multiplier system pivots (|A_10| > |A_00|): runs 0-2 (lanes of their own block) swap rows."""
    from hbvm_core.expressions import factory

    build = factory(DOUBLE)
    method, N, h = hc.HBVM(3, 2), 50, 0.01
    R = lanes.LANES + 5
    values = {
        "l1": np.linspace(0.6, 1.4, R),
        "m2": np.linspace(1.0, 3.0, R)[::-1].copy(),
        "grav": 9.81 * (1.0 + 0.5 * np.sin(np.arange(R))),
    }

    def run():
        return hc.integrate_ensemble(build(), method, h, N, params=values, sample_every=10)

    lock = against_per_run_block(monkeypatch, run, N)
    assert np.all(lock.status == OK)
    assert lock.backend_note == (
        f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (2 of a params row per lane; M != I per lane, "
        "diagonal)"
    )
    for r in (0, R // 2, R - 1):
        pb = build(**{key: float(val[r]) for key, val in values.items()})
        one = hc.integrate(pb, method, h, h * N, save_every=10, backend="numba")
        for key in ("q", "p"):
            assert_close(getattr(lock, key)[r], getattr(one, key), N, f"{key} of run {r}")


@pytest.mark.slow
def test_lanes_that_pivot_differently_in_one_block(monkeypatch):
    """A grid over l1 across l2 (0.5 to 1.5 against 0.7) with nu = 3: in one block some lanes swap rows of the
    multiplier system and others do not; every run as the per-run block's (no run fails: a swap written as a
    masked tuple assignment took wrong rows here, and a fifth of the runs diverged)."""
    from hbvm_core.expressions import factory

    method, N, h = hc.HBVM(4, 2), 100, 0.01
    values = {"l1": np.linspace(0.5, 1.5, 3 * lanes.LANES)}

    def run():
        return hc.integrate_ensemble(factory(RODS_IN_SPACE)(), method, h, N, params=values, sample_every=5)

    lock = against_per_run_block(monkeypatch, run, N)
    assert np.all(lock.status == OK)


def full_mass(a: float, c: float) -> np.ndarray:
    """A full M coupling x and z (y alone, so that M^-1 p0 stays tangent for the conical pendulum's p0 along y)."""
    return np.array([[2.0 * a, 0.0, c], [0.0, 1.5 * a, 0.0], [c, 0.0, a]])


@pytest.mark.slow
def test_full_mass_matrix_per_run_with_a_callback_called_lane_by_lane(monkeypatch):
    """Conical pendula of different gravities, each with a full M of its own, and a grad_U without a per-point
    form (``sliced_grad_U``: called once per lane): every run is the per-run block's, and the first and last their
    own per-run compiled loop's (M^-1 in the lanes is ``linalg.minv`` rewritten, its triangular loops unrolled)."""
    method, N = hc.HBVM(1, 1), 30
    R = lanes.MIN_GROUP + 2
    runs = []
    for r in range(R):
        pb = conical_pendulum(length=1.5, gravity=0.8 + 0.1 * r)
        kernels = dataclasses.replace(pb.kernels, grad_U=sliced_grad_U)
        runs.append(dataclasses.replace(pb, name="sliced_conical", kernels=kernels, M=full_mass(1.0 + 0.1 * r, 0.3)))
    h = 0.03 * (1.0 + 0.1 * np.arange(R) / R)

    def run():
        return hc.integrate_ensemble(runs, method, h, N, sample_every=5)

    lock = against_per_run_block(monkeypatch, run, N)
    assert np.all(lock.status == OK)
    assert lock.backend_note == (
        f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (1 of a params row per lane; M != I per lane, full)"
    )
    constants = lanes.constants_of(method.compiled_runner(runs[0]), runs[0], per_lane=True, has_m=True)
    assert constants["PARAM_CALLBACKS"] == ("grad_U",) and constants["POINT_CALLBACKS"] == ()
    for r in (0, R - 1):
        one = hc.integrate(runs[r], method, h[r], h[r] * N, save_every=5, backend="numba")
        n = one.q.shape[0]
        for key in ("q", "p"):
            assert_close(getattr(lock, key)[r, :n], getattr(one, key), N, f"{key} of run {r}")
