"""RATTLE's linear algebra (``methods.rattle.rattle_step``) on a sparse G: the Newton matrix G(q1)^T M^-1 G(q0)
and the velocity system G(q1)^T M^-1 G(q1) assembled over the pattern of G^T M^-1 G (``normal``) and solved by
``factor.Factorisation``; O(m + nnz) per Newton iteration."""

from __future__ import annotations

import numpy as np

from .path import inverse_mass


class SparseRattle:
    """G as its nonzeros (``Problem.sparse``), M^-1 diagonal: the products and solves of one RATTLE step."""

    name = "sparse"

    def __init__(self, problem) -> None:
        self.structure = problem.sparse
        self.dinv = inverse_mass(problem)
        self.dinv_nz = self.dinv[self.structure.rows]  # M^-1 at the row of each nonzero

    def G(self, Q: np.ndarray) -> np.ndarray:
        """G's nonzeros at the one point Q (1, m)."""
        return self.structure.values(Q)[0]

    def minv(self, v: np.ndarray) -> np.ndarray:
        return self.dinv * v

    def minv_G(self, G: np.ndarray) -> np.ndarray:
        return G * self.dinv_nz

    def times(self, G: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """G lam."""
        return self.structure.G_dot(G[None, :], lam)[0]

    def newton(self, G1: np.ndarray, MG0: np.ndarray, r: np.ndarray, c: float) -> np.ndarray:
        """dlam with -c G(q1)^T M^-1 G(q0) dlam = -r."""
        S = self.structure
        return S.factorisation.solve(S.normal.data(G1[None, :], MG0[None, :]), r / c)

    def velocity(self, G1: np.ndarray, MG1: np.ndarray, v: np.ndarray) -> np.ndarray:
        """x with G1^T M^-1 G1 x = G1^T v."""
        S = self.structure
        return S.factorisation.solve(S.normal.data(G1[None, :], MG1[None, :]), S.Gt_dot(G1[None, :], v)[0])
