"""Solves A x = b for matrices of one fixed sparsity pattern, the ordering found once per pattern.

The multiplier systems of a step (``normal``) are nearly symmetric positive definite (the symmetric part
h/2 rho_0^T M^-1 rho_0 dominates) and share G^T M^-1 G's pattern at every sweep and step. Once per pattern:

- a reverse Cuthill-McKee ordering (none where the pattern's own order is as narrow: a chain); when it leaves
  a narrow band (a chain, a loop through the fixed pin: tridiagonal), each solve is LAPACK's banded LU on the
  permuted matrix (gtsv for a tridiagonal one), O(nu b^2);
- otherwise (trees with many branches, graphs of wide band) a minimum-degree ordering of A + A^T taken from
  SuperLU once, and each solve a SuperLU factorisation of the permuted matrix with the natural ordering
  (the symbolic choice made once, diagonal pivots preferred).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError

Array = np.ndarray
#: widest band (lower + upper + 1) that takes the banded solve
BANDED_MAX = 17
FORMS = ("auto", "banded", "splu")


class Factorisation:
    """The ordering (and, for a band, its storage map) of a CSR pattern (indptr, indices) of size n."""

    def __init__(self, indptr: Array, indices: Array, n: int, form: str = "auto") -> None:
        from scipy import sparse
        from scipy.linalg import get_lapack_funcs
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        if form not in FORMS:
            raise ConfigError(f"form = {form!r}: expected one of {', '.join(FORMS)}")
        self.n = n
        r = np.repeat(np.arange(n), np.diff(indptr))
        c = np.asarray(indices)
        pattern = sparse.csr_matrix((np.ones(c.size), c, indptr), shape=(n, n))
        perm = reverse_cuthill_mckee((pattern + pattern.T).tocsr(), symmetric_mode=True)
        inv = np.argsort(perm)  # new index of old i
        lower, upper = int(np.max(inv[r] - inv[c], initial=0)), int(np.max(inv[c] - inv[r], initial=0))
        natural = int(np.max(r - c, initial=0)), int(np.max(c - r, initial=0))
        if sum(natural) <= lower + upper:  # the pattern's own order is as narrow (a chain): no permutation
            inv, (lower, upper) = np.arange(n), natural
        if form == "auto":
            form = "banded" if lower + upper + 1 <= BANDED_MAX else "splu"
        self.form = form
        if form == "banded":
            self.inv, self.bands = inv, (lower, upper)
            self.permuted = not np.array_equal(inv, np.arange(n))
            self._gtsv = get_lapack_funcs("gtsv", (np.zeros(1),))
            self.ab_index = (upper + inv[r] - inv[c]) * n + inv[c]
            return
        sample = sparse.csc_matrix((-np.ones(c.size), (r, c)), shape=(n, n)) + sparse.diags(
            np.diff(indptr) + 1.0
        )  # the pattern, diagonally dominant: a numeric matrix for SuperLU's ordering
        self.inv = sparse.linalg.splu(sample.tocsc(), permc_spec="MMD_AT_PLUS_A").perm_c
        self.permuted = True
        order = sparse.csc_matrix((np.arange(1.0, c.size + 1), (self.inv[r], self.inv[c])), shape=(n, n))
        self.order = order.data.astype(np.intp) - 1  # CSR entry feeding each CSC entry of P A P^T
        self.csc = (order.indices, order.indptr)
        self.bands = None

    def solve(self, data: Array, b: Array) -> Array:
        """x with A x = b, A the CSR ``data`` of the pattern; np.linalg.LinAlgError when A is singular."""
        from scipy import sparse
        from scipy.linalg import solve_banded

        if self.permuted:
            bp = np.empty(self.n)
            bp[self.inv] = b
        else:
            bp = np.array(b, dtype=float)  # a copy: gtsv overwrites it
        if self.form == "banded":
            lower, upper = self.bands
            ab = np.zeros((lower + upper + 1, self.n))
            ab.reshape(-1)[self.ab_index] = data  # (ab.flat[...] = and np.put are several times slower)
            if (lower, upper) == (1, 1) and self.n > 1:  # LAPACK gtsv, as solve_banded, without its checks
                *_, xp, info = self._gtsv(ab[2, :-1], ab[1], ab[0, 1:], bp, True, True, True, True)
                if info != 0:
                    raise np.linalg.LinAlgError(f"singular matrix (gtsv info {info})")
            else:
                xp = solve_banded((lower, upper), ab, bp, check_finite=False)
        else:
            Ap = sparse.csc_matrix((data[self.order], *self.csc), shape=(self.n, self.n))
            try:
                lu = sparse.linalg.splu(
                    Ap, permc_spec="NATURAL", diag_pivot_thresh=0.1, options={"SymmetricMode": True}
                )
            except RuntimeError as exc:  # SuperLU: "Factor is exactly singular"
                raise np.linalg.LinAlgError(str(exc)) from None
            xp = lu.solve(bp)
        return xp[self.inv] if self.permuted else xp
