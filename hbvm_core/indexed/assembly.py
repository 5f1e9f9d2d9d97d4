"""The problem's callbacks from its indexed terms, vectorised over points and over each term's range.

For the points Q (n, m), a term reads its slots as arrays Z_k = Q_pad[:, col_k] (n, K) (Q_pad: Q and the fixed
values, ``layout``) and evaluates once over its K indices (docs/method.md 1):

    U = sum_terms sum_i e(Z_i),     grad U = sum over (term, slot, i) of de/dz_k at column col_k[i],
    g_{o + i} = e(Z_i),             G[col_k[i], o + i] += de/dz_k (Z_i),    d2g_{o + i} = d2e(Z_i; W_i)

(o: the term's first constraint). The nonzeros of G are listed once per (term, slot, index) whose column is a
coordinate; a pair (coordinate, constraint) met twice (two slots at one coordinate) is summed: the pattern of
``sparse.SparseG``, so the sparse path serves the problem.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .layout import Layout
from .terms import Term

Array = np.ndarray


def _full(x, shape: tuple) -> Array:
    return np.broadcast_to(np.asarray(x, dtype=float), shape)


class Assembly:
    """U, grad_U, g, d2g and the sparse values of G of the terms on one layout; ``rows, cols``: G's pattern."""

    def __init__(self, potential: list[Term], constraints: list[Term], layout: Layout) -> None:
        self.layout, self.c, m = layout, layout.c, layout.m
        self.potential = [(t, iv, layout.columns(t, iv)) for t in potential for iv in [t.indices(layout.values)]]
        self.constraints = []
        offset = 0
        for t in constraints:
            iv = t.indices(layout.values)
            self.constraints.append((t, iv, layout.columns(t, iv), offset))
            offset += iv.size
        self.nu = offset
        # G's nonzeros, one per (term, active slot, index) at a coordinate (not a fixed value)
        rows, cols = [], []
        for t, iv, col, o in self.constraints:
            touched = np.zeros(iv.size, dtype=np.intp)
            for k in t.active:
                free = col[k] < m
                rows.append(col[k][free])
                cols.append(o + np.flatnonzero(free))
                touched += free
            if touched.size and touched.min() == 0:
                r = int(np.argmin(touched))
                where = f" at {t.over.var} = {iv[r]:g}" if t.over is not None else ""
                raise ConfigError(f"{t.key}{where}: touches no coordinate (its references are all fixed)")
        rows = np.concatenate(rows) if rows else np.zeros(0, np.intp)
        cols = np.concatenate(cols) if cols else np.zeros(0, np.intp)
        pairs, inverse = np.unique(rows * max(self.nu, 1) + cols, return_inverse=True)
        self._sum = None
        if pairs.size == rows.size:
            self.rows, self.cols = rows, cols
        else:  # a coordinate met by two slots of one constraint: their derivatives summed
            from scipy import sparse

            self.rows, self.cols = pairs // self.nu, pairs % self.nu
            self._sum = sparse.csr_matrix(
                (np.ones(rows.size), (inverse, np.arange(rows.size))), (pairs.size, rows.size)
            )
        # grad U: the (term, slot, index) entries at coordinates, summed into their columns
        at = [c[k][c[k] < m] for t, _, c in self.potential for k in t.active]
        at = np.concatenate(at) if at else np.zeros(0, np.intp)
        from scipy import sparse

        self._scatter = sparse.csr_matrix((np.ones(at.size), (at, np.arange(at.size))), (m, at.size))

    def _pad(self, Q: Array, fixed: Array) -> Array:
        return Q if fixed.size == 0 else np.concatenate([Q, np.broadcast_to(fixed, (Q.shape[0], fixed.size))], 1)

    def _slots(self, Qp: Array, cols: list[Array]) -> list[Array]:
        return [Qp[:, c] for c in cols]

    def U(self, Q: Array) -> Array:
        Qp, out = self._pad(Q, self.layout.fixed_values), np.zeros(Q.shape[0])
        for t, iv, cols in self.potential:
            out += _full(t.value(*self._slots(Qp, cols), iv, *self.c), (Q.shape[0], iv.size)).sum(axis=1)
        return out

    def grad_U(self, Q: Array) -> Array:
        Qp, n, m = self._pad(Q, self.layout.fixed_values), Q.shape[0], self.layout.m
        parts = []
        for t, iv, cols in self.potential:
            d = t.grad(*self._slots(Qp, cols), iv, *self.c)
            parts += [_full(dk, (n, iv.size))[:, cols[k] < m] for k, dk in zip(t.active, d)]
        if not parts:
            return np.zeros_like(Q, dtype=float)
        return np.asarray((self._scatter @ np.concatenate(parts, axis=1).T).T)

    def g(self, Q: Array) -> Array:
        Qp, out = self._pad(Q, self.layout.fixed_values), np.empty((Q.shape[0], self.nu))
        for t, iv, cols, o in self.constraints:
            out[:, o : o + iv.size] = t.value(*self._slots(Qp, cols), iv, *self.c)
        return out

    def values(self, Q: Array) -> Array:
        """The nonzeros of G at Q in the order of (rows, cols): shape (n, nnz)."""
        Qp, n, m = self._pad(Q, self.layout.fixed_values), Q.shape[0], self.layout.m
        parts = []
        for t, iv, cols, _ in self.constraints:
            d = t.grad(*self._slots(Qp, cols), iv, *self.c)
            parts += [_full(dk, (n, iv.size))[:, cols[k] < m] for k, dk in zip(t.active, d)]
        V = np.concatenate(parts, axis=1) if parts else np.zeros((n, 0))
        return V if self._sum is None else np.asarray((self._sum @ V.T).T)

    def d2g(self, Q: Array, V: Array) -> Array:
        Qp, Vp = self._pad(Q, self.layout.fixed_values), self._pad(V, np.zeros(self.layout.fixed_values.size))
        out = np.empty((Q.shape[0], self.nu))
        for t, iv, cols, o in self.constraints:
            out[:, o : o + iv.size] = t.d2(*self._slots(Qp, cols), iv, *self.c, *self._slots(Vp, cols))
        return out
