"""The indexed coordinates at the params' values: their numbering in q, their names, the fixed values, and the
column of q that each slot of a term reads at each index of its range.

Coordinates are numbered by index first, then by the order of their families: ``x[1], y[1], x[2], y[2], ...`` (a
chain's beads one after the other, so each constraint touches neighbouring columns). A reference outside its
family's range reads a fixed value (``problem.fixed``): column m + f of the padded state (q, fixed values).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .terms import Term, integer, integers

Array = np.ndarray


class Layout:
    """Numbering and fixed values of an ``IndexedModel``'s coordinates at the params ``values``."""

    def __init__(self, model, values: dict[str, float]) -> None:
        self.values = values
        self.c = np.array([values[p] for p in model.param_names], dtype=float)
        families = list(model.ranges)
        self.range: dict[str, tuple[int, int]] = {}
        keys = []
        for order, f in enumerate(families):
            rng = model.ranges[f]
            lo, hi = rng.bounds(f"problem.coordinates.{f}", values)
            if hi < lo:
                raise ConfigError(f"problem.coordinates.{f} = {rng.text!r}: empty ({lo}..{hi}) at the params {values}")
            self.range[f] = (lo, hi)
            keys.append(np.arange(lo, hi + 1) * len(families) + order)  # index first, then family
        flat = np.concatenate(keys)
        self.m = flat.size
        number = np.empty(self.m, dtype=np.intp)
        number[np.argsort(flat, kind="stable")] = np.arange(self.m)
        self.number: dict[str, Array] = {}  # family -> the coordinate of f[lo + j] at j
        start = 0
        names = np.empty(self.m, dtype=object)
        for f in families:
            lo, hi = self.range[f]
            self.number[f] = number[start : start + hi - lo + 1]
            names[self.number[f]] = [f"{f}[{j}]" for j in range(lo, hi + 1)]
            start += hi - lo + 1
        self.names = tuple(names)
        self._fixed(model)

    def _fixed(self, model) -> None:
        """The fixed references: per family the sorted indices and their columns m + f; their values."""
        found: dict[str, dict[int, int]] = {}
        vals = []
        for f, index, value, key in model.fixed:
            j = integer(f"{key}: index", index, self.values)
            lo, hi = self.range[f]
            if lo <= j <= hi:
                raise ConfigError(f"{key}: {f}[{j}] is a coordinate ({f} in {lo}..{hi}): fix only indices outside it")
            if j in found.setdefault(f, {}):
                raise ConfigError(f"{key}: {f}[{j}] is fixed twice")
            found[f][j] = self.m + len(vals)
            vals.append(float(value(*self.c)))
        self.fixed_values = np.array(vals, dtype=float)
        self.fixed = {}
        for f, at in found.items():
            idx = np.array(sorted(at), dtype=np.intp)
            self.fixed[f] = (idx, np.array([at[j] for j in idx], dtype=np.intp))
        if not np.all(np.isfinite(self.fixed_values)):
            raise ConfigError(f"problem.fixed: not finite at the params {self.values}")

    def family_vector(self, key: str, formulas: dict, out: Array) -> Array:
        """``out`` with each family's entries set to its formula of its index (``formulas``: family -> function)."""
        for f, fn in formulas.items():
            lo, hi = self.range[f]
            iv = np.arange(lo, hi + 1, dtype=float)
            out[self.number[f]] = np.broadcast_to(np.asarray(fn(iv, *self.c), dtype=float), iv.shape)
        if not np.all(np.isfinite(out)):
            raise ConfigError(f"{key}: not finite at the params {self.values}")
        return out

    def columns(self, term: Term, iv: Array) -> list[Array]:
        """Per slot of ``term``, the column of the padded state it reads at each loop index iv (ConfigError naming
        the term's key for an index outside its family's range that is not fixed)."""
        out = []
        for (f, _), fn, token in zip(term.slots, term.index, term.tokens):
            var = term.over.var if term.over is not None else "the index"
            j = integers(f"{term.key}: the index of {token}", fn, iv, self.c, var)
            lo, hi = self.range[f]
            inside = (j >= lo) & (j <= hi)
            col = np.empty(j.shape, dtype=np.intp)
            col[inside] = self.number[f][j[inside] - lo]
            outside = ~inside
            if outside.any():
                idx, cols = self.fixed.get(f, (np.zeros(0, np.intp), np.zeros(0, np.intp)))
                at = np.minimum(np.searchsorted(idx, j[outside]), max(idx.size - 1, 0))
                found = (idx[at] == j[outside]) if idx.size else np.zeros(int(outside.sum()), dtype=bool)
                if not found.all():
                    r = int(np.flatnonzero(outside)[np.flatnonzero(~found)[0]])
                    where = f" at {term.over.var} = {iv[r]:g}" if term.over is not None else ""
                    raise ConfigError(
                        f"{term.key}: {token}{where} is {f}[{j[r]}], outside {f}'s range {lo}..{hi} and not fixed "
                        f"(give '{f}[...]' in problem.fixed)"
                    )
                col[outside] = cols[at]
            out.append(col)
        return out
