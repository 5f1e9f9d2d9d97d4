"""G(q) with a fixed sparsity pattern (docs/method.md 1: column i of G is the gradient of g_i).

The pattern -- nonzero e sits at row ``rows[e]`` (a coordinate of q) and column ``cols[e]`` (a constraint) --
is found once per problem structure; the values are a vectorised callback ``values(Q) -> (n, nnz)`` for Q of
shape (n, m). Stacks of such matrices (rho_j of docs/method.md 3: s matrices of one pattern) are arrays of
shape (L, nnz), and the products below cost O(L nnz):

    G_dot(V, lam)  = (G_l lam)_l       (L, m)      Gt_dot(V, x) = (G_l^T x_l)_l   (L, nu)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np

from ..errors import ProblemError

Array = np.ndarray
LINEAR_ALGEBRA_CHOICES = ("auto", "sparse", "dense")
#: the most entries of a dense G (points x m x nu) that ``SparseG.dense`` builds (400 MB)
DENSE_MAX = 5 * 10**7


class SparseG:
    """The pattern (rows, cols) of G (m x nu) and its values at points.

    Parameters
    ----------
    rows, cols : array_like of int, shape (nnz,)
        Coordinate and constraint of each nonzero; no pair twice.
    values : callable
        ``values(Q) -> (n, nnz)``: the nonzeros of G at the n points Q of shape (n, m), in pattern order.
    m, nu : int
        Sizes of q and g.
    linear_algebra : {"auto", "sparse", "dense"}
        Which path the steppers take (``sparse.path``): "auto" chooses by size.
    """

    def __init__(self, rows, cols, values: Callable[[Array], Array], m: int, nu: int, linear_algebra: str = "auto"):
        self.rows = np.asarray(rows, dtype=np.intp).reshape(-1)
        self.cols = np.asarray(cols, dtype=np.intp).reshape(-1)
        self.values = values
        self.m, self.nu = int(m), int(nu)
        if linear_algebra not in LINEAR_ALGEBRA_CHOICES:
            raise ProblemError(
                f"linear_algebra = {linear_algebra!r}: expected one of {', '.join(LINEAR_ALGEBRA_CHOICES)}"
            )
        self.linear_algebra = linear_algebra
        if self.rows.shape != self.cols.shape:
            raise ProblemError(f"sparse G: rows has {self.rows.size} entries, cols {self.cols.size}")
        if self.rows.size and (
            self.rows.min() < 0 or self.rows.max() >= m or self.cols.min() < 0 or self.cols.max() >= nu
        ):
            raise ProblemError(f"sparse G: an index outside the {m} x {nu} matrix")
        if np.unique(self.rows * nu + self.cols).size != self.rows.size:
            raise ProblemError("sparse G: a (row, col) pair appears twice in the pattern")
        if np.bincount(self.cols, minlength=nu).min(initial=1) == 0:
            raise ProblemError("sparse G: a constraint with no nonzero (its gradient is identically zero)")

    @property
    def nnz(self) -> int:
        return self.rows.size

    @classmethod
    def from_matrix(
        cls, G_of_q: Callable[[Array], object], q0: Array, nu: int, linear_algebra: str = "auto"
    ) -> SparseG:
        """From a callback ``G_of_q(q) -> scipy.sparse matrix (m x nu)`` of one point: the pattern is the union of
        the nonzeros at q0 and at a point near it (an entry that vanishes at q0 by accident stays in), found
        once; ``values`` then reads the pattern's entries point by point."""
        from scipy import sparse

        q0 = np.asarray(q0, dtype=float)
        m = q0.size
        near = q0 + 1e-3 * np.cos(np.arange(1, m + 1))
        both = abs(sparse.csr_matrix(G_of_q(q0))) + abs(sparse.csr_matrix(G_of_q(near)))
        coo = sparse.coo_matrix(both)
        order = np.lexsort((coo.row, coo.col))
        rows, cols = coo.row[order], coo.col[order]

        def values(Q: Array) -> Array:
            out = np.empty((Q.shape[0], rows.size))
            for n, q in enumerate(Q):
                Gq = sparse.csr_matrix(G_of_q(q))
                out[n] = np.asarray(Gq[rows, cols]).reshape(-1)
                if abs(Gq).sum() > np.abs(out[n]).sum() * (1 + 1e-12) + 1e-300:
                    raise ProblemError("sparse G: G_of_q has a nonzero outside the pattern found at q0")
            return out

        return cls(rows, cols, values, m, nu, linear_algebra)

    # --- products over the nonzeros ------------------------------------------------------------
    def G_dot(self, V: Array, lam: Array) -> Array:
        """(G_l lam_l)_l for the stack V (L, nnz) and lam (nu,) or (L, nu): shape (L, m)."""
        return self.scatter_rows(V * np.asarray(lam).take(self.cols, axis=-1))  # take: far faster than fancy indexing

    def scatter_rows(self, W: Array) -> Array:
        """The sums of a stack W (L, nnz) over each row of the pattern: (L, m) (G_dot of W's products)."""
        L = W.shape[0]
        return np.bincount(self._flat(L, self.rows, self.m), W.ravel(), L * self.m).reshape(L, self.m)

    def Gt_dot(self, V: Array, x: Array) -> Array:
        """(G_l^T x_l)_l for the stack V (L, nnz) and x (m,) or (L, m): shape (L, nu)."""
        L = V.shape[0]
        w = V * np.asarray(x).take(self.rows, axis=-1)
        return np.bincount(self._flat(L, self.cols, self.nu), w.ravel(), L * self.nu).reshape(L, self.nu)

    def _flat(self, L: int, index: Array, size: int) -> Array:
        """index + size l for l < L, flattened (the bins of one bincount over a stack); cached per L."""
        key = (L, size)
        cache = self.__dict__.setdefault("_flat_cache", {})
        if key not in cache:
            cache[key] = (index[None, :] + size * np.arange(L)[:, None]).ravel()
        return cache[key]

    # --- dense views (small problems, checks) --------------------------------------------------
    def dense(self, Q: Array) -> Array:
        """G at the points Q as a dense (n, m, nu) array: the dense path's ``G`` callback (refused past
        DENSE_MAX entries: such problems run on the sparse path, HBVM and RATTLE)."""
        if Q.shape[0] * self.m * self.nu > DENSE_MAX:
            raise ProblemError(
                f"sparse G: a dense G of {Q.shape[0]} x {self.m} x {self.nu} entries is too large (at most "
                f"{DENSE_MAX:.0e}); the sparse path runs HBVM and RATTLE"
            )
        out = np.zeros((Q.shape[0], self.m, self.nu))
        out[:, self.rows, self.cols] = self.values(Q)
        return out

    def matrix(self, q: Array):
        """G(q) at one point as a scipy.sparse CSC matrix (m x nu)."""
        from scipy import sparse

        return sparse.csc_matrix((self.values(q[None, :])[0], (self.rows, self.cols)), shape=(self.m, self.nu))

    @cached_property
    def normal(self):
        """The pattern of G^T M^-1 G (diagonal M) and its assembly (``normal.NormalPattern``), found once."""
        from .normal import NormalPattern

        return NormalPattern(self)

    @cached_property
    def factorisation(self):
        """The solver of systems with the pattern of G^T M^-1 G, its ordering found once (``factor``)."""
        from .factor import Factorisation

        return Factorisation(self.normal.indptr, self.normal.indices, self.nu)
