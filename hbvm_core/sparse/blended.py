"""The simplified-Newton ("blended") iteration of HBVM(k, s) (``hbvm_core.blended``) on a sparse G.

The same residual (B1) and Newton matrix (B2) as the dense iteration, every block sparse:

    J = [[ I + h^2 (X^2 kron M^-1 K0),   h (X kron I) M^-1 rho ],
         [ C_l = rho_l^T + h sum_j X[j, l] (Hg gamma_j)^T,   0 ]]

K0 = d/dq [grad U + G lam0](q0) and the derivatives of G's nonzeros at q0 come from central differences of
grad_U and of G's values along one direction per colour of the coordinates (two coordinates share a colour when
no constraint touches both: a chain needs 4 colours whatever its length), so their cost does not grow with m;
U's Hessian is taken to couple only coordinates that share a constraint (the chain's U is linear) -- a K0
missing other couplings slows the iteration, the solution is the same. Each iteration factorises J by SuperLU, its
column ordering (COLAMD) found once per stepper (``column_order``); J's pattern, in that column order, and where each
term lands in its CSC data are found once per step (``FixedPattern``): an iteration assembles the data only.
"""

from __future__ import annotations

import numpy as np

from .path import inverse_mass

CBRT_EPS = float(np.finfo(float).eps) ** (1.0 / 3.0)


def colouring(conflict) -> np.ndarray:
    """A colour per index, greedy, no two indices that ``conflict`` (a symmetric CSR pattern) links alike."""
    colour = np.full(conflict.shape[0], -1)
    for a in range(conflict.shape[0]):
        taken = colour[conflict.indices[conflict.indptr[a] : conflict.indptr[a + 1]]]
        c = 0
        while c in taken:
            c += 1
        colour[a] = c
    return colour


def colourings(structure) -> tuple[np.ndarray, np.ndarray]:
    """Colours of the coordinates for G's values (none of one constraint alike: pattern B B^T, B G's pattern)
    and for grad U's Jacobian on that pattern (none two apart alike: (B B^T)^2); found once per structure."""
    from scipy import sparse

    if not hasattr(structure, "_colours"):
        B = sparse.csr_matrix(
            (np.ones(structure.nnz), (structure.rows, structure.cols)), shape=(structure.m, structure.nu)
        )
        near = (B @ B.T).tocsr()
        structure._colours = (colouring(near), colouring((near @ near).tocsr()))
    return structure._colours


def _central(f, q0: np.ndarray, colour: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """(f(q0 + v_c) - f(q0 - v_c)) / 2 for v_c = delta on the coordinates of colour c, one row per colour."""
    ncol = int(colour.max()) + 1
    V = np.zeros((ncol, q0.size))
    V[colour, np.arange(q0.size)] = delta
    out = f(np.concatenate([q0 + V, q0 - V]))
    return (out[:ncol] - out[ncol:]) / 2.0


def derivatives(problem, q0: np.ndarray, lam: np.ndarray):
    """(K0 as scipy.sparse (m x m), dG (nnz x m) sparse: d G_e / d q_a at q0), by coloured central differences."""
    from scipy import sparse

    S, m = problem.sparse, problem.m
    near, apart = colourings(S)
    delta = CBRT_EPS * np.maximum(1.0, np.abs(q0))
    dvals = _central(S.values, q0, near, delta)
    dgrad = _central(problem.grad_U, q0, apart, delta)
    # G's nonzero e depends on the coordinates of its constraint: pairs (e, a) with a in column cols[e]'s pattern
    Bt = sparse.csr_matrix((np.ones(S.nnz), (S.cols, S.rows)), shape=(S.nu, m))
    E = (sparse.csr_matrix((np.ones(S.nnz), (np.arange(S.nnz), S.cols)), shape=(S.nnz, S.nu)) @ Bt).tocoo()
    e, a = E.row, E.col
    dG = sparse.csr_matrix((dvals[near[a], e] / delta[a], (e, a)), shape=(S.nnz, m))
    # K0 = Hess U (on the coupling pattern and the diagonal) + sum_e lam[cols[e]] dG[e, a] at row rows[e]
    C = (sparse.csr_matrix((np.ones(S.nnz), (S.rows, S.cols)), shape=(m, S.nu)) @ Bt).tocoo()
    c, b = C.row, C.col
    hess_U = sparse.csr_matrix((dgrad[apart[b], c] / delta[b], (c, b)), shape=(m, m))
    lam_e = sparse.diags(lam[S.cols])
    rows_e = sparse.csr_matrix((np.ones(S.nnz), (S.rows, np.arange(S.nnz))), shape=(m, S.nnz))
    K0 = hess_U + rows_e @ lam_e @ dG
    return K0.tocsr(), dG


def column_order(stepper, J) -> tuple[np.ndarray, np.ndarray]:
    """SuperLU's COLAMD column ordering of J (column k of J to place order[k]) and its inverse (the columns of J
    in that order), found once per stepper from its first J: J's pattern is the structure's at every step (B2),
    so each iteration factorises J[:, gather] with the natural ordering and reads x_k = y[order[k]]."""
    from scipy.sparse.linalg import splu

    found = getattr(stepper, "blended_order", None)
    if found is None or found[0].size != J.shape[1]:
        try:
            order = splu(J, permc_spec="COLAMD").perm_c
        except RuntimeError as exc:
            raise np.linalg.LinAlgError(str(exc)) from None
        found = stepper.blended_order = (order, np.argsort(order))
    return found


class FixedPattern:
    """The CSC pattern (indices, indptr) of a square matrix of ``size`` given as terms at (rows, cols), its column
    c placed at ``place[c]``, and the slot of each term in the CSC data (duplicates summed)."""

    def __init__(self, rows: np.ndarray, cols: np.ndarray, place: np.ndarray, size: int) -> None:
        key = place[cols].astype(np.int64) * size + rows
        unique, self.slot = np.unique(key, return_inverse=True)  # column-major: rows ascending in each column
        self.slot = self.slot.reshape(-1)
        self.indices = (unique % size).astype(np.int32)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(unique // size, minlength=size))]).astype(np.int32)
        self.size = size

    def matrix(self, values: np.ndarray):
        """The matrix with these term values (in the order of ``rows``, ``cols``) as scipy.sparse CSC."""
        from scipy import sparse

        data = np.bincount(self.slot, values, self.indices.size)
        return sparse.csc_matrix((data, self.indices, self.indptr), shape=(self.size, self.size))


def newton_map(stepper, q0, Mp0, h, n=0, t=0.0):
    """As ``hbvm_core.blended.newton_map`` on the problem's sparse G: (the map gamma -> (gamma + dgamma,
    (lam, psi_0, rho_0, Q)), and the terms of the rule's scale: h M^-1 rho lam's largest term in the last call and
    that times ``SparseSweep.amplification``, as the sweep's)."""
    from scipy import sparse
    from scipy.sparse.linalg import splu

    from ..blended import initial_multiplier

    pb, tab, S = stepper.problem, stepper.tab, stepper.problem.sparse
    s, m, nu, X = tab.s, pb.m, pb.nu, tab.X
    D = inverse_mass(pb)
    Dnz = D[S.rows]
    lam = initial_multiplier(pb) if stepper.blended_lam is None else stepper.blended_lam
    K0, dG = derivatives(pb, q0, lam)
    A11 = sparse.identity(s * m) + h * h * sparse.kron(X @ X, sparse.diags(D) @ K0)
    block = np.arange(s)[:, None] * m
    r12, c12 = (block + S.rows).ravel(), np.tile(S.cols, s) + s * m
    r21, c21 = np.tile(S.cols, s) + s * m, (block + S.rows).ravel()
    A11 = A11.tocoo()
    rows, cols = np.concatenate([A11.row, r12, r21]), np.concatenate([A11.col, c12, c21])
    # J's column ordering (COLAMD: the pattern's), found once per stepper from A11 and generic off-diagonal blocks
    generic = np.concatenate([A11.data, 1.0 + 0.5 * np.sin(np.arange(r12.size + r21.size))])
    order, _ = column_order(stepper, sparse.csc_matrix((generic, (rows, cols)), shape=(s * m + nu,) * 2))
    pattern = FixedPattern(rows, cols, order, s * m + nu)
    size = 0.0

    def newton(gamma):
        nonlocal lam, size
        Q = q0 + h * (tab.Ihat @ gamma)
        psi = tab.W.T @ pb.grad_U(Q)
        rho = tab.W.T @ S.values(Q)  # (s, nnz)
        XMrho = X @ (rho * Dnz)
        F1 = gamma + h * (X @ (psi * D)) + h * S.G_dot(XMrho, lam)
        F1[0] -= Mp0
        F2 = S.Gt_dot(rho, gamma).sum(axis=0)
        HG = (dG @ gamma.T).T  # (s, nnz): Hess g applied to gamma_j, on G's pattern
        Cv = rho + h * (X.T @ HG)
        J = pattern.matrix(np.concatenate([A11.data, h * XMrho.ravel(), Cv.ravel()]))  # columns in COLAMD's order
        try:
            lu = splu(J, permc_spec="NATURAL")
        except RuntimeError as exc:
            raise np.linalg.LinAlgError(str(exc)) from None
        delta = -lu.solve(np.concatenate([F1.ravel(), F2]))[order]
        size = h * float(np.max(S.G_dot(np.abs(XMrho), np.abs(lam))))
        lam = lam + delta[s * m :]
        return gamma + delta[: s * m].reshape(s, m), (lam, psi[0], rho[0], Q)

    def terms() -> tuple[float, float]:
        return size, size * stepper.sparse.amplification

    return newton, terms
