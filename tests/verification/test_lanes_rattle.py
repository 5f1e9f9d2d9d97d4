"""RATTLE's lockstep blocks (``kernels/rattle_lanes.py``: Newton on lam for g(q1) = 0 and the velocity projection,
Stormer-Verlet for nu = 0, one run per lane) against their oracles: the per-run block (HBVM_LANES=0) and the
per-run compiled loop (``hbvm_core.integrate``). The lanes differ in params, h, N, save rules and M (diagonal,
full); a lane whose Newton fails is masked, its neighbours go on. RATTLE keeps g at round-off (Newton to the
round-off rule) and H to O(h^2) without drift (symplectic): H_error is compared with the per-run loop's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_lanes_params import EPS, against_per_run_block, assert_close, full_mass, sliced_grad_U
from user_problems import RODS_IN_SPACE

import hbvm_core as hc
from hbvm_core.kernels import lanes, rattle_lanes
from hbvm_core.kernels.rules import NO_CONVERGENCE, OK
from hbvm_core.methods.rattle import RATTLE
from hbvm_core.problems.parametric import conical_pendulum
from hbvm_core.problems.pendulum import theta_pendulum


def assert_like_its_own_loop(lock, r, pb, method, h, N, every):
    """Run r of the lockstep result is its own per-run compiled loop's (every step kept, the points of the save
    rule picked here: n % every == 0 and the last): q, p, the last step's lam, and the largest |H - H0| over the
    saved points (evaluated here on the loop's points), to eps times the scale times the steps."""
    one = hc.integrate(pb, method, float(h), float(h) * N, save_every=1, backend="numba")
    rows = [n for n in range(N + 1) if n % every == 0 or n == N]
    n = int(lock.n_saved[r])
    assert n == len(rows), f"saved points of run {r}"
    for key in ("t", "q", "p"):
        assert_close(getattr(lock, key)[r, :n], getattr(one, key)[rows], N, f"{key} of run {r}")
    assert_close(lock.lam[r], one.lam[-1], N, f"lam of run {r}")
    H = pb.hamiltonian(one.q[rows], one.p[rows])
    scale = max(1.0, float(np.max(np.abs(H))))
    assert abs(lock.H_error[r] - np.max(np.abs(H - H[0]))) <= 8 * EPS * scale * N, f"H drift of run {r}"


def assert_g_at_round_off(lock, N):
    """|g| of every run at round-off: eps times the scale of q^2 (g's of these problems) times the steps."""
    scale = max(1.0, float(np.nanmax(lock.q**2)))
    assert np.all(lock.g_error[lock.status == OK] <= 8 * EPS * scale * N), np.max(lock.g_error)


# --------------------------------------------------------------------------- quick: nothing compiles
def test_refusal_by_the_sizes_of_the_step():
    """m (nu + 1) and nu against the limits (counted by hand), and RATTLE's runner goes lockstep (applies)."""
    assert rattle_lanes.refusal(None, 3, 1) is None
    assert rattle_lanes.refusal(None, 512, 1) is None  # 1024, the limit itself
    assert rattle_lanes.refusal(None, 600, 1) == f"RATTLE's m (nu + 1) = 1200, above lockstep's {lanes.LANE_WORK_MAX}"
    assert rattle_lanes.refusal(None, 20, 17) == f"RATTLE's nu = 17, above lockstep's {lanes.LANE_SYSTEM_MAX}"
    pb = conical_pendulum()
    runner = RATTLE().compiled_runner(pb)
    assert lanes.applies(runner, pb.m, pb.nu) and lanes.lane_form(runner) is rattle_lanes


@pytest.mark.parametrize("problem", [conical_pendulum, theta_pendulum])
def test_every_per_run_array_lives_in_the_work_array(problem):
    """The generated lockstep source (not compiled): no per-run array of RATTLE is left as a name in the block
    (each is WK at its lane's slots), and the callbacks are called on their batch views (one point per lane)."""
    import ast

    pb = problem()
    constants = rattle_lanes.constants_of(RATTLE().compiled_runner(pb), pb, per_lane=True)
    tree = ast.parse(rattle_lanes.lane_source(constants))
    block = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "lane_block")
    names = {n.id for n in ast.walk(block) if isinstance(n, ast.Name)}
    assert not names & set(rattle_lanes.RATTLE_ARRAYS), names & set(rattle_lanes.RATTLE_ARRAYS)
    calls = {n.func.id for n in ast.walk(block) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"grad_U"} <= calls and (("g" in calls) == (pb.nu > 0))


# --------------------------------------------------------------------------- lockstep against the per-run loops
@pytest.mark.slow
def test_conical_pendulum_over_length_and_gravity(monkeypatch):
    """A grid of lengths (q0, g) and gravities (U), with a block of one params row among them, h, N and save rules
    per run: every run is the per-run block's (the same Newton counts) and, for a few, its own per-run loop's."""
    method, N = RATTLE(), 40
    lengths, gravities = np.meshgrid(np.linspace(0.6, 2.0, 5), np.linspace(0.5, 2.5, 4))
    length = np.r_[lengths.ravel(), np.full(lanes.LANES, 1.5)]
    gravity = np.r_[gravities.ravel(), np.full(lanes.LANES, 1.2)]
    R = length.size
    h = 0.04 * (1.0 + 0.2 * np.arange(R) / R)
    every = 1 + np.arange(R) % 6
    Ns = N - np.arange(R) % 3  # lanes that finish early idle
    params = {"length": length, "gravity": gravity}

    def run():
        return hc.integrate_ensemble(conical_pendulum(), method, h, Ns, params=params, sample_every=every)

    lock = against_per_run_block(monkeypatch, run, N)
    assert np.all(lock.status == OK)
    np.testing.assert_array_equal(lock.steps, Ns)
    assert lock.backend_note == (
        f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (1 of one params row; 2 of a params row per lane)"
    )
    assert_g_at_round_off(lock, N)
    for r in (0, 7, R - 1):
        pb = conical_pendulum(length=float(length[r]), gravity=float(gravity[r]))
        assert_like_its_own_loop(lock, r, pb, method, h[r], int(Ns[r]), every[r])


@pytest.mark.slow
def test_rods_in_space_with_a_diagonal_mass_matrix_over_its_params(monkeypatch):
    """The formula problem of two masses on rods in space (m = 6, nu = 3: Newton's 3 x 3 systems) over l1 (q0, g;
    across l2 = 0.7, so that the lanes pivot differently), grav (U) and m2 (U and M: the lanes' diagonal M
    differ): every run is the per-run block's, and a few their own per-run loop's."""
    from hbvm_core.expressions import factory

    build = factory(RODS_IN_SPACE)
    method, N, h = RATTLE(), 60, 0.01
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
    assert_g_at_round_off(lock, N)
    for r in (0, R // 2, R - 1):
        pb = build(**{key: float(val[r]) for key, val in values.items()})
        assert_like_its_own_loop(lock, r, pb, method, h, N, 10)


@pytest.mark.slow
def test_full_mass_matrix_per_run_with_a_callback_called_lane_by_lane(monkeypatch):
    """Conical pendula of different gravities, each with a full M of its own (M^-1 in the lanes: ``linalg.minv``
    rewritten), and a grad_U without a per-point form (``sliced_grad_U``: called once per lane)."""
    method, N = RATTLE(), 30
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
    constants = rattle_lanes.constants_of(method.compiled_runner(runs[0]), runs[0], per_lane=True, has_m=True)
    assert constants["PARAM_CALLBACKS"] == ("grad_U",) and constants["DIAG_M"] is False
    assert_g_at_round_off(lock, N)
    for r in (0, R - 1):
        assert_like_its_own_loop(lock, r, runs[r], method, h[r], N, 5)


@pytest.mark.slow
def test_a_lane_whose_newton_fails_leaves_its_neighbours(monkeypatch):
    """Runs 5 and 11 of a block take steps far too long for Newton (h = 3 and 1.5 on a pendulum of period ~2):
    they fail at their first step as the per-run block says (no convergence, no steps, the start point only, lam
    NaN); every other run of the block is the per-run block's and its own loop's."""
    method, N, R = RATTLE(), 30, 20
    h = np.full(R, 0.05)
    h[5], h[11] = 3.0, 1.5
    gravity = np.linspace(0.5, 2.0, R)

    def run():
        return hc.integrate_ensemble(conical_pendulum(), method, h, N, params={"gravity": gravity}, sample_every=3)

    lock = against_per_run_block(monkeypatch, run, N)
    failed = np.zeros(R, dtype=bool)
    failed[[5, 11]] = True
    assert np.all(lock.status[failed] == NO_CONVERGENCE) and np.all(lock.status[~failed] == OK)
    np.testing.assert_array_equal(lock.fail_step[failed], 0)
    np.testing.assert_array_equal(lock.steps, np.where(failed, 0, N))
    assert np.all(lock.n_saved[failed] == 1) and np.all(np.isnan(lock.lam[failed]))
    assert lock.backend_note.startswith(f"lockstep: {R} of {R} runs")
    for r in (4, 6, 12):
        assert_like_its_own_loop(lock, r, conical_pendulum(gravity=float(gravity[r])), method, h[r], N, 3)


@pytest.mark.slow
def test_stormer_verlet_lanes_without_constraints(monkeypatch):
    """nu = 0 (the pendulum in theta): RATTLE is Stormer-Verlet, one sweep a step; lanes of their own q0 and h."""
    method, N, R = RATTLE(), 30, 20
    h = 0.05 * (1.0 + np.arange(R) / R)
    q0 = np.linspace(0.0, 1.0, R)[:, None]

    def run():
        return hc.integrate_ensemble(theta_pendulum(), method, h, N, q0=q0, sample_every=4)

    lock = against_per_run_block(monkeypatch, run, N)
    assert np.all(lock.status == OK)
    np.testing.assert_array_equal(lock.iterations, N)  # one sweep a step
    assert lock.backend_note == f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (2 of one params row)"
    for r in (0, R - 1):
        pb = dataclasses.replace(theta_pendulum(), q0=q0[r].copy())
        assert_like_its_own_loop(lock, r, pb, method, h[r], N, 4)
