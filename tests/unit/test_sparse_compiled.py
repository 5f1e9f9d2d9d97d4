"""hbvm_core.sparse.compiled: the fixed-point sweep fused into one compiled function, against the numpy sweep
(``SparseSweep.sweep``) and the dense path; its tridiagonal solve against dense elimination."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

import hbvm_core as hc
from hbvm_core.errors import ConfigError
from hbvm_core.methods import HBVM
from hbvm_core.problems import branched_tree, chain, closed_chain
from hbvm_core.sparse import compiled
from hbvm_core.sparse.hbvm import SparseSweep

EPS = np.finfo(float).eps


def _chain(n: int):
    j = np.arange(n)
    return chain(n=n, mass=1.0 + 0.5 * np.sin(j), theta0=0.4 * np.sin(np.pi * (j + 1) / n),
                 omega0=0.2 * np.cos(0.3 * j), linear_algebra="sparse")  # fmt: skip


def test_tridiagonal_solve_pivots_like_dense_elimination():
    """``gtsv`` (uncompiled) on a tridiagonal matrix whose diagonal is smaller than its subdiagonal (row swaps):
    backward error below 10 eps |A| |x| (partial pivoting is backward stable for tridiagonal systems)."""
    rng = np.random.default_rng(4)
    n = 9
    dl, d, du, b = (
        rng.standard_normal(n - 1),
        1e-3 * rng.standard_normal(n),
        rng.standard_normal(n - 1),
        rng.standard_normal(n),
    )
    A = np.diag(d) + np.diag(dl, -1) + np.diag(du, 1)
    x = b.copy()
    assert compiled.gtsv(dl.copy(), d.copy(), du.copy(), x) == 0
    assert np.abs(A @ x - b).max() <= 10 * EPS * (np.abs(A) @ np.abs(x)).max()
    assert compiled.gtsv(np.zeros(2), np.zeros(3), np.zeros(2), np.ones(3)) == 1  # a zero pivot, named


def _sweeps(problem, method, fused):
    """(numpy sweep, fused sweep) from the same gamma: the stepper's first sweep with gamma_0 = M^-1 p0."""
    numpy_sweep = SparseSweep(method.tableau, problem, "numpy")
    q0, Mp0, h = problem.q0, problem.minv(problem.p0), 0.1 / np.sqrt(problem.nu)
    gamma = np.zeros((method.tableau.s, problem.m))
    gamma[0] = Mp0 + 0.01 * np.cos(np.arange(problem.m))  # not the fixed point: every term in play
    new, (lam, psi0, rho0, _) = numpy_sweep.sweep(q0, None, Mp0, h, gamma)
    Q = q0 + h * (method.tableau.Ihat @ gamma)
    V = problem.sparse.values(Q)
    got = fused(numpy_sweep, problem.grad_U(Q), V, q0, Mp0, h)
    Q_next = q0 + h * (method.tableau.Ihat @ new)  # the next sweep's stage points, from the numpy gamma
    return (new, lam, psi0, rho0, numpy_sweep.size, condition(problem, method, V, h), Q_next), got


def condition(problem, method, V, h) -> float:
    """cond_2 of this sweep's A = h sum_{j,l} X[j, l] rho_j^T M^-1 rho_l, rho = W^T G(Q), by scipy.sparse
    products and a dense SVD."""
    S, X = problem.sparse, method.tableau.X
    rho = [sparse.csr_matrix((r, (S.rows, S.cols)), shape=(S.m, S.nu)) for r in method.tableau.W.T @ V]
    D = sparse.diags(problem.minv(np.ones(problem.m)))
    A = sum(h * X[j, l] * (rho[j].T @ D @ rho[l]) for j in range(len(rho)) for l in range(len(rho)))
    return float(np.linalg.cond(A.toarray()))


def _python_fused(sweep, gU, V, q0, Mp0, h):
    """``compiled._fused_sweep`` run by Python itself (no compile): the quick tier's check of its loops."""
    return compiled.FusedSweep(sweep, compiled._fused_sweep)(gU, V, q0, Mp0, h)


def _assert_sweeps_agree(reference, got):
    """Two orders of the same sums and two eliminations of A lam = b (each backward stable): lam to 10 eps cond(A)
    relative, gamma to 10 eps sqrt(cond(A)) times the largest term summed into it (the tensions h X M^-1 rho lam
    that nearly cancel: an error eps |b| / lambda_min of lam moves rho lam by eps sqrt(cond) times them); psi_0,
    rho_0 (sums of k terms) to 4 eps; the next stage points q0 + h Ihat gamma to gamma's error (|Ihat| <= 1, h < 1)
    plus 4 eps |Q|."""
    new, lam, psi0, rho0, size, cond, Q_next = reference
    g_new, g_lam, g_psi0, g_rho0, g_size, g_Q_next = got
    tol_gamma = 10 * EPS * np.sqrt(cond) * size
    assert np.abs(g_new - new).max() <= tol_gamma
    assert np.abs(g_Q_next - Q_next).max() <= tol_gamma + 4 * EPS * np.abs(Q_next).max()
    assert np.abs(g_lam - lam).max() <= 10 * EPS * cond * np.abs(lam).max()
    assert np.abs(g_psi0 - psi0).max() <= 4 * EPS * np.abs(psi0).max()
    assert np.abs(g_rho0 - rho0).max() <= 4 * EPS * np.abs(rho0).max()
    assert abs(g_size - size) <= 10 * EPS * cond * size  # sum of |h X M^-1 rho| |lam|: lam's error


@pytest.mark.parametrize("method", [HBVM(2, 2), HBVM(3, 3)], ids=lambda m: m.label())
def test_fused_loops_equal_the_numpy_sweep_uncompiled(method):
    """The fused function's loops, run by Python (40 links), give the numpy sweep's gamma, lam, psi_0, rho_0."""
    reference, got = _sweeps(_chain(40), method, _python_fused)
    _assert_sweeps_agree(reference, got)


def test_switch_refuses_unknown_values_and_patterns_it_cannot_solve(monkeypatch):
    """HBVM_SPARSE_SWEEP = a value outside auto/numpy/compiled: one line naming it; numpy: the numpy sweep."""
    monkeypatch.setenv(compiled.SWITCH, "fast")
    with pytest.raises(ConfigError, match="HBVM_SPARSE_SWEEP = 'fast'"):
        SparseSweep(HBVM(2, 2).tableau, _chain(40))
    monkeypatch.setenv(compiled.SWITCH, "numpy")
    traj = hc.integrate(_chain(40), HBVM(2, 2), 0.05, 0.1)
    assert (traj.attrs["linear_algebra"], traj.attrs["sparse_sweep"]) == ("sparse", "numpy")
    assert compiled.applies(closed_chain(n=40).sparse.factorisation)  # the rods a path: tridiagonal, reordered
    assert not compiled.applies(branched_tree(depth=5).sparse.factorisation)  # a tree: SuperLU, the numpy sweep


@pytest.mark.slow  # compiles the fused sweep (some 2 s, once: cached on disk)
@pytest.mark.parametrize("method", [HBVM(2, 2), HBVM(4, 2), HBVM(3, 3)], ids=lambda m: m.label())
def test_compiled_sweep_equals_the_numpy_sweep_at_a_thousand_links(method):
    """One compiled sweep of a 1000-link chain against the numpy sweep from the same gamma (tolerances as
    ``_assert_sweeps_agree``); the same compiled function for every k, s and size (one signature)."""
    if compiled.fused_sweep() is None:
        pytest.skip("numba is not installed")
    reference, got = _sweeps(_chain(1000), method, lambda sw, *a: compiled.FusedSweep(sw)(*a))
    _assert_sweeps_agree(reference, got)
    assert len(compiled.fused_sweep().signatures) == 1


@pytest.mark.slow  # compiles the fused sweep
def test_compiled_sweep_runs_equal_the_dense_path_and_keep_H_and_g(monkeypatch):
    """Integrated with the compiled sweep: a 16-link chain equals the dense path to 10 eps * scale * steps (as
    test_sparse_chain's sparse against dense), and 1000 links keep H and g at round-off (U linear, g quadratic:
    10 eps times their terms per step)."""
    from tests.verification.test_sparse_chain import _chain_data, assert_sparse_and_conserved

    if compiled.fused_sweep() is None:
        pytest.skip("numba is not installed")
    monkeypatch.setenv(compiled.SWITCH, "compiled")
    h, steps = 0.01, 20
    runs = {a: hc.integrate(chain(n=16, **_chain_data(16), linear_algebra=a), HBVM(2, 2), h, h * steps)
            for a in ("dense", "sparse")}  # fmt: skip
    assert runs["sparse"].attrs["sparse_sweep"] == "compiled" and runs["dense"].attrs["sparse_sweep"] == "none"
    dense, sparse = runs["dense"], runs["sparse"]
    scale = 1.0 + np.abs(dense.q).max() + np.abs(dense.p).max() + np.abs(dense.lam).max()
    assert np.abs(sparse.q - dense.q).max() <= 10 * EPS * scale * steps
    assert np.abs(sparse.p - dense.p).max() <= 10 * EPS * scale * steps
    n, h, steps = 1000, 0.005, 5
    problem = chain(n=n, **_chain_data(n))
    traj = hc.integrate(problem, HBVM(2, 2), h, h * steps)
    assert traj.attrs["sparse_sweep"] == "compiled"
    assert_sparse_and_conserved(problem, traj, steps)
