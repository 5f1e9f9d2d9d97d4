"""The problem's checks and state functions on a sparse G, O(m + nnz) per point (docs/method.md 1).

``validate_sparse`` is ``Problem.validate`` for a problem on the sparse path: vectorisation and shapes, the
derivatives against central differences along a few fixed directions (a dense G, m central differences,
would cost O(m nnz)), consistent initial data and a regular G^T M^-1 G at q0.
"""

from __future__ import annotations

import numpy as np

from ..checks import FLOOR, STEP, TOL, _compare, _directions, check_vectorised
from ..checks import enabled as derivative_checks_enabled
from ..errors import NonFiniteError, ProblemError
from .path import inverse_mass

Array = np.ndarray
#: points per block of the vectorised evaluations of G's values (bounds the memory of long trajectories)
BLOCK = 64


def hidden_constraint(structure, q: Array, v: Array) -> Array:
    """G(q_n)^T v_n, shape (n, nu), for v = M^-1 p."""
    out = np.empty((q.shape[0], structure.nu))
    for a in range(0, q.shape[0], BLOCK):
        out[a : a + BLOCK] = structure.Gt_dot(structure.values(q[a : a + BLOCK]), v[a : a + BLOCK])
    return out


def multiplier(problem, q: Array, p: Array) -> Array:
    """lambda(q, p) = [G^T M^-1 G]^-1 [d2g(v, v) - G^T M^-1 grad U], v = M^-1 p, point by point."""
    S, D = problem.sparse, inverse_mass(problem)
    v = p * D
    rhs = problem.d2g(q, v) - hidden_constraint(S, q, problem.grad_U(q) * D)
    out = np.empty((q.shape[0], S.nu))
    for n in range(q.shape[0]):
        Gv = S.values(q[n : n + 1])
        out[n] = S.factorisation.solve(S.normal.data(Gv, Gv * D[S.rows]), rhs[n])
    return out


def validate_sparse(problem, consistency_tol: float, max_condition: float) -> None:
    """ProblemError (NonFiniteError) with one line for what ``Problem.validate`` refuses, on the sparse G: g(q0)
    or the hidden constraint above ``consistency_tol`` times their scale, a G^T M^-1 G at q0 whose condition
    number exceeds ``max_condition`` (a lower bound of it, from one solve)."""
    S, name, m, nu = problem.sparse, problem.name, problem.m, problem.nu
    check_vectorised(problem, keys=("U", "grad_U", "g", "d2g"))
    Q = np.stack([problem.q0, problem.q0 + 1e-3])
    expected = {"U": (2,), "grad_U": (2, m), "g": (2, nu), "sparse G values": (2, S.nnz)}
    results = {"U": problem.U(Q), "grad_U": problem.grad_U(Q), "g": problem.g(Q), "sparse G values": S.values(Q)}
    for key, val in results.items():
        if np.shape(val) != expected[key]:
            raise ProblemError(f"{name}: callback {key} returned shape {np.shape(val)}, expected {expected[key]}")
        if not np.all(np.isfinite(val)):
            raise NonFiniteError(f"{name}: callback {key} returned non-finite values at q0")
    if problem.check_derivatives and derivative_checks_enabled():
        _check_directional(problem)
    q, D = problem.q0[None, :], inverse_mass(problem)
    scale = 1.0 + np.abs(problem.q0).max() + np.abs(problem.p0).max()
    g0 = np.abs(problem.g(q)[0])
    if g0.max() > consistency_tol * scale:
        i = int(np.argmax(g0))
        raise ProblemError(f"{name}: inconsistent initial data, |g(q0)| = {g0[i]:.3e} (expected 0): constraint {i}")
    Gv = S.values(q)
    hidden = np.abs(S.Gt_dot(Gv, problem.p0 * D)[0])
    if hidden.max() > consistency_tol * scale * (1.0 + np.abs(Gv).max()):
        i = int(np.argmax(hidden))
        raise ProblemError(
            f"{name}: inconsistent initial data, hidden constraint |G(q0)^T M^-1 p0| = {hidden[i]:.3e} (expected "
            f"0): constraint {i}"
        )
    A = S.normal.data(Gv, Gv * D[S.rows])
    try:
        x = S.factorisation.solve(A, np.ones(nu))
    except np.linalg.LinAlgError:
        x = np.full(nu, np.inf)
    bound = np.abs(S.normal.matrix(A)).sum(axis=1).max() * np.abs(x).max()  # <= cond_inf(A)
    if not bound <= max_condition:
        raise ProblemError(f"{name}: G^T M^-1 G is singular at q0 (condition >= {bound:.3e})")


def _check_directional(problem) -> None:
    """grad_U . v, G^T v and v^T Hess(g_i) v against central differences of U, g and G along 3 directions v."""
    S = problem.sparse
    P = problem.q0[None, :]
    V = _directions(problem.m, 3)
    h = STEP * (1.0 + float(np.abs(problem.q0).max()))
    X = np.concatenate([P + h * V, P - h * V])
    with np.errstate(all="ignore"):
        U0 = abs(float(problem.U(P)[0]))
        fdU = (problem.U(X[:3]) - problem.U(X[3:])) / (2 * h)
        size = 1.0 + float(np.abs(problem.q0).max())
        dU = np.einsum("m,nm->n", problem.grad_U(P)[0], V)
        floor = np.full(3, FLOOR * U0 / size)
        _compare(problem, "grad_U", "the central differences of U", dU, fdU, floor, np.repeat(P, 3, 0), TOL)
        g = problem.g(X)
        fdG = (g[:3] - g[3:]) / (2 * h)
        Gv = S.values(P)
        GtV = S.Gt_dot(np.repeat(Gv, 3, 0), V)
        floor = np.full(3, FLOOR * np.abs(problem.g(P)).max() / size)
        _compare(problem, "sparse G values", "the central differences of g", GtV, fdG, floor, np.repeat(P, 3, 0), TOL)
        if problem.d2g is not None:
            GX = S.values(X)
            fd2 = (S.Gt_dot(GX[:3], V) - S.Gt_dot(GX[3:], V)) / (2 * h)
            floor = np.full(3, FLOOR * np.abs(Gv).max() / size)
            d2 = problem.d2g(np.repeat(P, 3, 0), V)
            _compare(problem, "d2g", "the central differences of G", d2, fd2, floor, np.repeat(P, 3, 0), TOL)
