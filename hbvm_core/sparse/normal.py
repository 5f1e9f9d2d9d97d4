"""The pattern of G^T M^-1 G (M diagonal) and the assembly over its nonzeros (docs/method.md 3).

The multiplier system of HBVM(k, s) is

    A = h sum_{j,l} X[j, l] rho_j^T M^-1 rho_l

and RATTLE's Newton and velocity systems are G(q1)^T M^-1 G(q0) and G(q1)^T M^-1 G(q1): each a sum of
L_j^T D R_j with L_j, R_j of G's pattern and D diagonal. Entry (c1, c2) gathers the products of the nonzeros
e1 of column c1 and e2 of column c2 in one row (coordinate): the list of such pairs, and where each lands in
the CSR data of A, is found once per pattern; an assembly is then one product per pair and one bincount,
O(sum over coordinates of (constraints touching it)^2) -- O(nu) for a chain.
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray


class NormalPattern:
    """Pairs (e1, e2) of nonzeros of G in one row (those with e1 != e2: the pairs (e, e) are implied), where each
    lands (``target``: the pairs (e, e) first), and the CSR pattern (indptr, indices) of G^T D G."""

    def __init__(self, structure) -> None:
        from scipy import sparse

        rows, cols, nu = structure.rows, structure.cols, structure.nu
        nnz = rows.size
        B = sparse.csr_matrix((np.ones(nnz), (rows, np.arange(nnz))), shape=(structure.m, nnz))
        pairs = (B.T @ B).tocoo()  # (e1, e2) nonzero iff rows[e1] == rows[e2]
        e1, e2 = pairs.row.astype(np.intp), pairs.col.astype(np.intp)
        unique, target = np.unique(cols[e1] * nu + cols[e2], return_inverse=True)
        target = target.reshape(-1)
        # the pairs (e, e), one per nonzero, need no gather: their targets first, in nonzero order, then the others'
        same = e1 == e2
        diagonal = np.empty(nnz, dtype=np.intp)
        diagonal[e1[same]] = target[same]
        self.e1, self.e2 = e1[~same], e2[~same]
        self.target = np.concatenate([diagonal, target[~same]])
        c1, self.indices = np.divmod(unique, nu)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(c1, minlength=nu))])
        self.nnz = unique.size
        self.size = nu

    def data(self, left: Array, right: Array) -> Array:
        """CSR data of sum_j L_j^T R_j for stacks left, right of shape (L, nnz) in G's pattern (the diagonal
        M^-1, and X, already applied to ``right``)."""
        w = np.concatenate(
            [np.einsum("jp,jp->p", left, right), np.einsum("jp,jp->p", left.take(self.e1, 1), right.take(self.e2, 1))]
        )
        return np.bincount(self.target, w, self.nnz)

    def matrix(self, data: Array):
        """The assembled matrix as scipy.sparse CSR (for checks and small solves)."""
        from scipy import sparse

        return sparse.csr_matrix((data, self.indices, self.indptr), shape=(self.size, self.size))
