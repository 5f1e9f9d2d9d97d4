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


def _pieces(items: list, m: int) -> tuple[list, list[Array], list[Array], int]:
    """Where each (term, active slot)'s derivative goes in an (n, E) array of entries: per term, the pieces (its
    position in the term's ``grad``, the indices at coordinates or None for all, start, stop); the entries'
    columns of q and their loop positions; E."""
    pieces, at, where, start = [], [], [], 0
    for t, _, cols in items:
        per = []
        for a, k in enumerate(t.active):
            free = cols[k] < m
            sel = None if free.all() else np.flatnonzero(free)
            per.append((a, sel, start, start + int(free.sum())))
            at.append(cols[k][free])
            where.append(np.flatnonzero(free))
            start += int(free.sum())
        pieces.append(per)
    return pieces, at, where, start


class Assembly:
    """U, grad_U, g, d2g and the sparse values of G of the terms on one layout; ``rows, cols``: G's pattern."""

    def __init__(self, potential: list[Term], constraints: list[Term], layout: Layout) -> None:
        from scipy import sparse

        self.layout, self.c, m = layout, layout.c, layout.m
        self.potential = [(t, iv, layout.columns(t, iv)) for t in potential for iv in [t.indices(layout.values)]]
        self.constraints, self.offsets = [], []
        offset = 0
        for t in constraints:
            iv = t.indices(layout.values)
            self.constraints.append((t, iv, layout.columns(t, iv)))
            self.offsets.append(offset)
            offset += iv.size
        self.nu = offset
        # G's nonzeros, one per (term, active slot, index) at a coordinate (not a fixed value)
        self._g_pieces, at, where, self._g_size = _pieces(self.constraints, m)
        parts = iter(zip(at, where))
        rows, cols = [], []
        for (t, iv, _), o in zip(self.constraints, self.offsets):
            touched = np.zeros(iv.size, dtype=np.intp)
            for _k in t.active:
                r, w = next(parts)
                rows.append(r)
                cols.append(o + w)
                touched[w] += 1
            if touched.size and touched.min() == 0:
                r = int(np.argmin(touched))
                what = f" at {t.over.var} = {iv[r]:g}" if t.over is not None else ""
                raise ConfigError(f"{t.key}{what}: touches no coordinate (its references are all fixed)")
        rows = np.concatenate(rows) if rows else np.zeros(0, np.intp)
        cols = np.concatenate(cols) if cols else np.zeros(0, np.intp)
        pairs, inverse = np.unique(rows * max(self.nu, 1) + cols, return_inverse=True)
        self._sum = None
        if pairs.size == rows.size:
            self.rows, self.cols = rows, cols
        else:  # a coordinate met by two slots of one constraint: their derivatives summed
            self.rows, self.cols = pairs // self.nu, pairs % self.nu
            self._sum = sparse.csr_matrix(
                (np.ones(rows.size), (inverse, np.arange(rows.size))), (pairs.size, rows.size)
            )
        # grad U: the (term, slot, index) entries at coordinates, summed into their columns; computed once where
        # no derivative depends on q (a linear potential: gravity)
        self._u_pieces, at, _, self._u_size = _pieces(self.potential, m)
        at = np.concatenate(at) if at else np.zeros(0, np.intp)
        self._scatter = sparse.csr_matrix((np.ones(at.size), (at, np.arange(at.size))), (m, at.size))
        self._grad_U0 = None
        if all(t.grad_constant for t, _, _ in self.potential):
            self._grad_U0 = self._grad_U(np.zeros((1, m)))[0]

    def _derivatives(self, items: list, pieces: list, size: int, Qp: Array) -> Array:
        """The (n, size) entries: each term's derivatives at its indices at coordinates (``_pieces``)."""
        out = np.empty((Qp.shape[0], size))
        for (t, iv, cols), per in zip(items, pieces):
            if per:
                d = t.grad(*self._slots(Qp, cols), iv, *self.c)
                for a, sel, start, stop in per:
                    out[:, start:stop] = d[a] if sel is None or np.ndim(d[a]) == 0 else d[a][..., sel]
        return out

    def _pad(self, Q: Array, fixed: Array) -> Array:
        return Q if fixed.size == 0 else np.concatenate([Q, np.broadcast_to(fixed, (Q.shape[0], fixed.size))], 1)

    def _slots(self, Qp: Array, cols: list[Array]) -> list[Array]:
        return [Qp[:, c] for c in cols]

    def U(self, Q: Array) -> Array:
        Qp, out = self._pad(Q, self.layout.fixed_values), np.zeros(Q.shape[0])
        for t, iv, cols in self.potential:
            value = np.broadcast_to(
                np.asarray(t.value(*self._slots(Qp, cols), iv, *self.c), float), (Q.shape[0], iv.size)
            )
            out += value.sum(axis=1)
        return out

    def grad_U(self, Q: Array) -> Array:
        if self._grad_U0 is not None:
            return np.repeat(self._grad_U0[None, :], Q.shape[0], axis=0)
        return self._grad_U(Q)

    def _grad_U(self, Q: Array) -> Array:
        V = self._derivatives(self.potential, self._u_pieces, self._u_size, self._pad(Q, self.layout.fixed_values))
        return np.asarray((self._scatter @ V.T).T)

    def g(self, Q: Array) -> Array:
        Qp, out = self._pad(Q, self.layout.fixed_values), np.empty((Q.shape[0], self.nu))
        for (t, iv, cols), o in zip(self.constraints, self.offsets):
            out[:, o : o + iv.size] = t.value(*self._slots(Qp, cols), iv, *self.c)
        return out

    def values(self, Q: Array) -> Array:
        """The nonzeros of G at Q in the order of (rows, cols): shape (n, nnz)."""
        V = self._derivatives(self.constraints, self._g_pieces, self._g_size, self._pad(Q, self.layout.fixed_values))
        return V if self._sum is None else np.asarray((self._sum @ V.T).T)

    def d2g(self, Q: Array, V: Array) -> Array:
        Qp, Vp = self._pad(Q, self.layout.fixed_values), self._pad(V, np.zeros(self.layout.fixed_values.size))
        out = np.empty((Q.shape[0], self.nu))
        for (t, iv, cols), o in zip(self.constraints, self.offsets):
            out[:, o : o + iv.size] = t.d2(*self._slots(Qp, cols), iv, *self.c, *self._slots(Vp, cols))
        return out
