"""Planar beads joined by rigid rods in a graph, some rods pinned at the origin, under gravity.

Bead b sits at x_b in R^2, q = (x_0, y_0, x_1, y_1, ...), m = 2 n; rod e joins beads a_e and b_e (a_e = -1:
the pin at the origin) with length l_e:

    U = gravity sum_b mass_b y_b,      g_e = |x_{b_e} - x_{a_e}|^2 - l_e^2,      M = diag(mass_b, mass_b)

Column e of G holds 2 d_e at the two coordinates of b_e and -2 d_e at those of a_e (d_e = x_{b_e} - x_{a_e}):
four nonzeros per rod (two for a pinned one), the pattern of ``sparse.SparseG``. U is linear and g
quadratic, so HBVM(k, s) with k >= s conserves H and g to round-off (docs/method.md 3).
"""

from __future__ import annotations

import numpy as np

from ..sparse import SparseG

Array = np.ndarray


class Rods:
    """The rod graph (a, b) of n beads: U, grad_U, g, d2g and the sparse pattern of G."""

    def __init__(self, a: Array, b: Array, n: int, length: Array, mass: Array, gravity: float) -> None:
        self.a = np.where(np.asarray(a) < 0, n, a).astype(np.intp)  # the pin is a padded bead n at the origin
        self.b = np.asarray(b, dtype=np.intp)
        self.n, self.nu = n, self.b.size
        self.length2 = np.asarray(length, dtype=float) ** 2
        self.mass = np.asarray(mass, dtype=float)
        self.gravity = float(gravity)
        self._grad_row = np.zeros(2 * n)
        self._grad_row[1::2] = self.gravity * self.mass
        xy = np.arange(2)
        free = self.a < n
        own, other = (2 * self.b[:, None] + xy).ravel(), (2 * self.a[:, None] + xy).ravel()
        # G's nonzero e is 2 (q[_plus[e]] - q[_minus[e]]) (the pin at 2 n, 2 n + 1), in ``pattern`` order
        self._plus = np.concatenate([own, (2 * self.a[free, None] + xy).ravel()])
        self._minus = np.concatenate([other, (2 * self.b[free, None] + xy).ravel()])

    def _beads(self, Q: Array) -> Array:
        """(points, n + 1, 2): the beads and the pin."""
        return np.concatenate([Q, np.zeros((Q.shape[0], 2))], axis=1).reshape(Q.shape[0], self.n + 1, 2)

    def _d(self, Q: Array) -> Array:
        X = self._beads(Q)  # np.take: far faster than fancy indexing along axis 1
        return np.take(X, self.b, axis=1) - np.take(X, self.a, axis=1)  # (points, nu, 2)

    def U(self, Q: Array) -> Array:
        return self.gravity * (Q[:, 1::2] @ self.mass)

    def grad_U(self, Q: Array) -> Array:
        """gravity mass_b at each y_b, the same at every point (U linear)."""
        return np.repeat(self._grad_row[None, :], Q.shape[0], axis=0)

    def g(self, Q: Array) -> Array:
        d = self._d(Q)
        return np.einsum("nex,nex->ne", d, d) - self.length2

    def d2g(self, Q: Array, V: Array) -> Array:
        """v^T Hess(g_e) v = 2 |v_{b_e} - v_{a_e}|^2."""
        w = self._d(V)
        return 2.0 * np.einsum("nex,nex->ne", w, w)

    def pattern(self) -> tuple[Array, Array, Array]:
        """(rows, cols, pinned): +2 d_e at the rows of b_e for every rod, then -2 d_e at those of a_e for the
        rods not pinned (``pinned`` marks which)."""
        e = np.arange(self.nu)
        free = self.a < self.n
        rows = np.concatenate([np.stack([2 * self.b, 2 * self.b + 1], 1).ravel(),
                               np.stack([2 * self.a[free], 2 * self.a[free] + 1], 1).ravel()])  # fmt: skip
        cols = np.concatenate([np.repeat(e, 2), np.repeat(e[free], 2)])
        return rows, cols, free

    def values(self, Q: Array) -> Array:
        """The nonzeros of G at Q in ``pattern`` order, shape (points, nnz): 2 (x_{b_e} - x_{a_e}) at b_e's
        coordinates and 2 (x_{a_e} - x_{b_e}) at a_e's, each the difference of two of q's coordinates (the pin's
        0 padded after them)."""
        X = np.concatenate([2.0 * Q, np.zeros((Q.shape[0], 2))], axis=1)  # 2 x exactly: 2 (a - b) = 2 a - 2 b
        out = X.take(self._plus, axis=1)
        out -= X.take(self._minus, axis=1)
        return out

    def structure(self, linear_algebra: str = "auto") -> SparseG:
        rows, cols, _ = self.pattern()
        return SparseG(rows, cols, self.values, 2 * self.n, self.nu, linear_algebra)
