"""The sparse path (hbvm_core.sparse) on chains of beads and rods: against an independent solver in the
link angles, H and g at round-off for 1000 links, equal to the dense path (and failing as it does), a closed loop
and a tree."""

from __future__ import annotations

import os

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import hbvm_core as hc
from hbvm_core.methods import HBVM, RATTLE
from hbvm_core.problems import branched_tree, chain, closed_chain

#: the unit round-off of float64
EPS = np.finfo(float).eps


def _chain_data(n: int) -> dict:
    """Masses 1 +- 0.5 (M != I), a bent initial shape and angular speeds that vary along the chain."""
    j = np.arange(n)
    return {
        "mass": 1.0 + 0.5 * np.sin(j),
        "theta0": 0.4 * np.sin(np.pi * (j + 1) / n),
        "omega0": 0.2 * np.cos(0.3 * j),
    }


def _angles_rhs(t, y, length, mass, gravity):
    """The chain's Lagrangian in the link angles theta_j (bead i at sum_{j<=i} l_j (sin, -cos) theta_j):

    sum_k mu_jk l_j l_k [cos(th_j - th_k) th_k'' + sin(th_j - th_k) th_k'^2] + gravity l_j sin(th_j) T_j = 0,
    T_j = sum_{i>=j} m_i, mu_jk = T_max(j,k)."""
    n = length.size
    th, om = y[:n], y[n:]
    tail = np.cumsum(mass[::-1])[::-1]
    mu = tail[np.maximum.outer(np.arange(n), np.arange(n))]
    ll = np.outer(length, length) * mu
    d = th[:, None] - th[None, :]
    rhs = -(ll * np.sin(d)) @ (om**2) - gravity * length * np.sin(th) * tail
    return np.concatenate([om, np.linalg.solve(ll * np.cos(d), rhs)])


def _angles_reference(n: int, t_end: float) -> tuple[np.ndarray, np.ndarray]:
    """(q, p) at t_end from the angle ODE by DOP853 at rtol 1e-12."""
    data, length = _chain_data(n), np.ones(n)
    y0 = np.concatenate([data["theta0"], data["omega0"]])
    sol = solve_ivp(_angles_rhs, (0.0, t_end), y0, method="DOP853", rtol=1e-12, atol=1e-12,
                    args=(length, data["mass"], 1.0))  # fmt: skip
    th, om = sol.y[:n, -1], sol.y[n:, -1]
    q = np.cumsum(np.stack([np.sin(th), -np.cos(th)], 1) * length[:, None], 0).ravel()
    v = np.cumsum(np.stack([np.cos(th), np.sin(th)], 1) * (length * om)[:, None], 0).ravel()
    return q, np.repeat(data["mass"], 2) * v


@pytest.mark.parametrize("method", [HBVM(2, 2), RATTLE()], ids=["hbvm22", "rattle"])
def test_fifty_links_against_the_angle_solver_at_second_order(method):
    """HBVM(2,2) and RATTLE are second order in (q, p) (docs/method.md 3): the error against the angle
    solution (1e-12 accurate, far below) falls by 4 when h halves, and is below C h^2 with C = 10, the size of
    the chain's accelerations (gravity times its 50 unit masses' weight spread over the links)."""
    n, t_end = 50, 1.0
    problem = chain(n=n, **_chain_data(n))
    q_ref, p_ref = _angles_reference(n, t_end)
    errors = []
    for h in (0.02, 0.01):
        traj = hc.integrate(problem, method, h, t_end)
        assert traj.attrs["linear_algebra"] == "sparse"  # m = 100 >= SPARSE_MIN_M: chosen by size
        errors.append(max(np.abs(traj.q[-1] - q_ref).max(), np.abs(traj.p[-1] - p_ref).max()))
    rate = np.log2(errors[0] / errors[1])
    assert 1.9 < rate < 2.2, (errors, rate)
    assert errors[1] < 10 * 0.01**2


def _scales(problem, traj) -> tuple[float, float]:
    """Sizes of the terms of H (sum |m g y| + kinetic energy) and of g (|q| |d| ~ max |q| for unit rods)."""
    rods = problem.U.__self__
    H_terms = np.abs(rods.mass * traj.q[:, 1::2]).sum(1) + 0.5 * (traj.p**2 / np.repeat(rods.mass, 2)).sum(1)
    return float(H_terms.max()), float(np.abs(traj.q).max())


def assert_sparse_and_conserved(problem, traj, steps: int) -> float:
    """The run took the sparse path and kept H and g at round-off: 10 eps times their terms' size (``_scales``)
    per step. Returns the size of q (g's scale)."""
    assert traj.attrs["linear_algebra"] == "sparse"
    H_scale, q_scale = _scales(problem, traj)
    H = traj.H()
    assert np.abs(H - H[0]).max() <= 10 * EPS * H_scale * steps
    assert np.abs(traj.g()).max() <= 10 * EPS * q_scale * steps
    return q_scale


def test_thousand_links_keep_H_and_g_at_round_off():
    """U linear and g quadratic: HBVM(2,2) conserves both exactly (docs/method.md 3), so what is left is the
    round-off of summing H's terms (eps times their size) and of the rods' lengths (eps |q|), once per step:
    tolerance 10 eps * scale * steps."""
    n, h, steps = 1000, 0.005, 5
    problem = chain(n=n, **_chain_data(n))
    traj = hc.integrate(problem, HBVM(2, 2), h, h * steps)
    q_scale = assert_sparse_and_conserved(problem, traj, steps)
    rattle = hc.integrate(problem, RATTLE(), h, h * steps)  # RATTLE: g solved to round-off, H only to O(h^2)
    assert rattle.attrs["linear_algebra"] == "sparse"
    assert np.abs(rattle.g()).max() <= 10 * EPS * q_scale * steps


@pytest.mark.parametrize(
    ("factory", "kw"),
    [(chain, {"n": 16, **_chain_data(16)}), (closed_chain, {"n": 12, "mass": 1.0 + 0.3 * np.cos(np.arange(12))}),
     (branched_tree, {"depth": 4})],
    ids=["chain", "closed_chain", "branched_tree"],
)  # fmt: skip
@pytest.mark.parametrize(
    "method", [HBVM(2, 2), HBVM(4, 2), HBVM(3, 3), HBVM(4, 2, solver="blended"), RATTLE()], ids=lambda m: m.label()
)
def test_sparse_path_equals_the_dense_path(factory, kw, method):
    """Two implementations of the same step (dense einsum and elimination vs sums over the nonzeros and a
    sparse LU; blended: the Newton matrix from coloured differences, dense: from m of them), both iterated to
    round-off: they agree to 10 eps * scale * steps in q and p (each step's
    round-off, carried along); lam to 2 / h^2 times that (RATTLE: lam moves q1 by h^2/2 M^-1 G lam)."""
    h, steps = 0.01, 20
    runs = {}
    for algebra in ("dense", "sparse"):
        problem = factory(**kw, linear_algebra=algebra)
        runs[algebra] = hc.integrate(problem, method, h, h * steps)
        assert runs[algebra].attrs["linear_algebra"] == algebra
    dense, sparse = runs["dense"], runs["sparse"]
    scale = 1.0 + np.abs(dense.q).max() + np.abs(dense.p).max() + np.abs(dense.lam).max()
    assert np.abs(sparse.q - dense.q).max() <= 10 * EPS * scale * steps
    assert np.abs(sparse.p - dense.p).max() <= 10 * EPS * scale * steps
    assert np.abs(sparse.lam - dense.lam).max() <= 10 * EPS * scale * steps * 2 / h**2


def test_sparse_rattle_fails_where_and_as_the_dense_rattle_fails():
    """At h = 0.5 on unit rods Newton on the position constraint stops converging within a few steps: the sparse
    path, the same iteration on other linear algebra, fails at the same step with the dense path's words
    (methods/rattle.py, RATTLE_REASONS)."""
    failures = []
    for algebra in ("dense", "sparse"):
        with pytest.raises(hc.ConvergenceError) as info:
            hc.integrate(chain(n=16, theta0=0.3, linear_algebra=algebra), RATTLE(), 0.5, 10.0)
        failures.append((info.value.step, info.value.reason))
    assert failures[0] == failures[1]
    assert failures[0][1] == "Newton on the position constraint did not converge"


@pytest.mark.parametrize(
    ("problem", "form"),
    [(closed_chain(n=60, mass=1.0 + 0.3 * np.cos(np.arange(60))), "banded"), (branched_tree(depth=7), "splu")],
    ids=["closed_chain", "branched_tree"],
)
def test_loop_and_tree_through_the_sparse_path(problem, form):
    """A closed loop (cyclic G^T M^-1 G, banded after reordering) and a binary tree of 127 beads (wide band:
    the sparse LU): HBVM(2,2) keeps g and H at round-off (quadratic g, linear U; tolerance as for the chain)."""
    assert problem.sparse.factorisation.form == form
    h, steps = 0.01, 50
    traj = hc.integrate(problem, HBVM(2, 2), h, h * steps)
    assert_sparse_and_conserved(problem, traj, steps)
    assert np.abs(traj.hidden()).max() > 0  # the trajectory moved: the hidden constraint is only O(h^2)


def test_small_chains_stay_dense_and_large_ones_go_sparse():
    """The switch by size (sparse.path.SPARSE_MIN_M = 64 coordinates), said in the trajectory's attrs."""
    assert hc.integrate(chain(n=10), HBVM(2, 2), 0.1, 0.2).attrs["linear_algebra"] == "dense"
    assert hc.integrate(chain(n=40), HBVM(2, 2), 0.1, 0.2).attrs["linear_algebra"] == "sparse"
    assert hc.integrate(chain(n=40), HBVM(2, 2, solver="blended"), 0.1, 0.2).attrs["linear_algebra"] == "sparse"


def test_a_study_of_a_chain_stores_which_path_it_took(tmp_path):
    """A study's run of the built-in chain (no compiled callbacks: the numpy path) records linear_algebra and the
    sparse sweep it took in its store, and the loaded trajectory carries them; g at round-off there too."""
    from hbvm_workflow.storage import load_trajectory
    from hbvm_workflow.study import expand_study
    from hbvm_workflow.worker import solve_job

    cfg = {"problem": "chain", "params": {"n": 40, "theta0": 0.3}, "methods": [{"k": 2, "s": 2}], "t_end": 1,
           "h": [0.05], "errors": {"reference": "none"}}  # fmt: skip
    (job,) = expand_study("chain", cfg, results=str(tmp_path / "results")).jobs.values()
    assert solve_job(job)["status"] == "ok"
    problem = chain(n=40, theta0=0.3)
    traj = load_trajectory(job.store, problem)
    assert traj.attrs["linear_algebra"] == "sparse" and traj.attrs["backend"] == "numpy"
    # a chain's G^T M^-1 G is tridiagonal: the compiled sweep, unless the run asks for numpy's (the quick tier does)
    want = "numpy" if os.environ.get("HBVM_SPARSE_SWEEP") == "numpy" else "compiled"
    assert traj.attrs["sparse_sweep"] == want
    assert np.abs(traj.g()).max() <= 10 * EPS * np.abs(traj.q).max() * traj.steps
