"""The polynomial-multiplier HBVM's lockstep blocks (``kernels/polynomial_lanes.py``: fixed-point sweeps with the
multiplier system of size s nu per lane, the optional energy-preserving projection) against their oracles: the
per-run block (HBVM_LANES=0) and the per-run compiled loop (``hbvm_core.integrate``). The lanes differ in params,
h and save rules and M (diagonal, full); a lane whose sweeps fail is masked, its neighbours go on."""

from __future__ import annotations

import ast
import dataclasses

import numpy as np
import pytest
from test_lanes_params import against_per_run_block, full_mass, sliced_grad_U
from test_lanes_rattle import assert_like_its_own_loop
from user_problems import RODS_IN_SPACE

import hbvm_core as hc
from hbvm_core.kernels import lanes, polynomial_lanes
from hbvm_core.kernels.rules import OK
from hbvm_core.methods.polynomial import PolynomialHBVM
from hbvm_core.problems.parametric import conical_pendulum


# --------------------------------------------------------------------------- quick: nothing compiles
@pytest.mark.parametrize("projection", [False, True])
def test_every_per_run_array_lives_in_the_work_array(projection):
    """The generated lockstep source (not compiled), with a full M: no per-run array is left as a name in the block
    (each is WK at its lane's slots), the projection's G call is there exactly where the method projects, and the
    template's sizes s nu, s m are the constants (no local sn, sm)."""
    pb = dataclasses.replace(conical_pendulum(), M=full_mass(1.0, 0.3))
    method = PolynomialHBVM(3, 2, projection=projection)
    runner = method.compiled_runner(pb)
    assert lanes.applies(runner, pb.m, pb.nu) and lanes.lane_form(runner) is polynomial_lanes
    constants = polynomial_lanes.constants_of(runner, pb, per_lane=True)
    assert constants["HAS_M"] and not constants["DIAG_M"] and constants["SN_SIZE"] == 2 and constants["SL_SIZE"] == 6
    tree = ast.parse(polynomial_lanes.lane_source(constants, runner.arrays))
    block = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "lane_block")
    names = {n.id for n in ast.walk(block) if isinstance(n, ast.Name)}
    assert not names & set(polynomial_lanes.POLYNOMIAL_ARRAYS), names & set(polynomial_lanes.POLYNOMIAL_ARRAYS)
    assert not names & {"sn", "sm"}
    G_calls = [n for n in ast.walk(block) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "G"]
    assert sorted(ast.unparse(c.args[0]) for c in G_calls) == (["Q", "Q1"] if projection else ["Q"])


# --------------------------------------------------------------------------- lockstep against the per-run loops
@pytest.mark.slow
@pytest.mark.parametrize("projection", [False, True])
def test_conical_pendulum_over_length_and_gravity(monkeypatch, projection):
    """A grid of lengths (q0, g) and gravities (U), with a block of one params row among them, h and save rules
    per run, plain and projected: every run is the per-run block's (the same sweep counts) and, for a few, its own
    per-run loop's."""
    method, N = PolynomialHBVM(3, 2, projection=projection), 40
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
    for r in (0, 7, R - 1):
        pb = conical_pendulum(length=float(length[r]), gravity=float(gravity[r]))
        assert_like_its_own_loop(lock, r, pb, method, h[r], N, every[r])


@pytest.mark.slow
def test_rods_in_space_with_a_diagonal_mass_matrix_over_its_params(monkeypatch):
    """The formula problem of two masses on rods in space (m = 6, nu = 3, s = 2: a multiplier system of 6 per
    lane) over l1 (q0, g), grav (U) and m2 (U and M): every run is the per-run block's, a few their own loop's."""
    from hbvm_core.expressions import factory

    build = factory(RODS_IN_SPACE)
    method, N, h = PolynomialHBVM(4, 2), 40, 0.01
    R = lanes.LANES + 3
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
        f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (2 of a params row per lane; M != I per lane, "
        "diagonal)"
    )
    for r in (0, R - 1):
        pb = build(**{key: float(val[r]) for key, val in values.items()})
        assert_like_its_own_loop(lock, r, pb, method, h, N, 10)


@pytest.mark.slow
def test_full_mass_matrix_and_a_failing_lane(monkeypatch):
    """Conical pendula, each with a full M of its own and a grad_U called lane by lane (``sliced_grad_U``), one of
    them with a step far too long for the sweeps (h = 10: no convergence at its first step, as the per-run block says;
    its neighbours are the per-run block's and their own loop's)."""
    method, N = PolynomialHBVM(2, 2, projection=True), 30
    R = lanes.MIN_GROUP + 2
    runs = []
    for r in range(R):
        pb = conical_pendulum(length=1.5, gravity=0.8 + 0.1 * r)
        kernels = dataclasses.replace(pb.kernels, grad_U=sliced_grad_U)
        runs.append(dataclasses.replace(pb, name="sliced_conical", kernels=kernels, M=full_mass(1.0 + 0.1 * r, 0.3)))
    h = 0.03 * (1.0 + 0.1 * np.arange(R) / R)
    h[3] = 10.0

    def run():
        return hc.integrate_ensemble(runs, method, h, N, sample_every=5)

    lock = against_per_run_block(monkeypatch, run, N)
    assert lock.status[3] != OK and lock.steps[3] == lock.fail_step[3] == 0 and np.all(np.isnan(lock.lam[3]))
    assert np.all(np.delete(lock.status, 3) == OK)
    assert lock.backend_note == (
        f"lockstep: {R} of {R} runs, blocks of {lanes.LANES} lanes (1 of a params row per lane; M != I per lane, full)"
    )
    for r in (2, 4, R - 1):
        assert_like_its_own_loop(lock, r, runs[r], method, h[r], N, 5)
