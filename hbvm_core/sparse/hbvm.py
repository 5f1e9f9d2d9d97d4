"""The fixed-point HBVM(k, s) sweep on a sparse G (docs/method.md 3), O(k m + s nnz) per sweep.

rho_j = sum_i b_i P_j(c_i) G(Q_i) share G's pattern, so the stack rho is an (s, nnz) array of values; with
D = M^-1 diagonal,

    A   = h sum_{j,l} X[j, l] rho_j^T D rho_l          (assembled over the pattern of G^T D G, ``normal``)
    b   = rho_0^T D p0 - h sum_j rho_j^T (X D psi)_j
    gamma = e_0 D p0 - h X D (psi + rho lam)

and A lam = b is solved by ``factor.Factorisation`` (ordering found once per pattern). The time loop, warm
start and stopping rule are the dense stepper's (``methods.hbvm.HBVMStepper``), which hands its sweeps here.
"""

from __future__ import annotations

import numpy as np

from .path import inverse_mass


def condition(normal, factor, data, iterations: int = 20) -> float:
    """An estimate of cond(A) for the symmetric positive definite A (``data`` in ``normal``'s pattern): the
    largest row sum of |A| (>= lambda_max) over 1 / lambda_min from inverse power iteration (Rayleigh
    quotients of A^-1, <= 1 / lambda_min)."""
    A = normal.matrix(data)
    x = np.cos(np.arange(1, normal.size + 1))
    mu = 0.0
    for _ in range(iterations):
        y = factor.solve(data, x)
        mu = float(x @ y) / float(x @ x)
        x = y / np.linalg.norm(y)
    return float(abs(A).sum(axis=1).max()) * mu


class SparseSweep:
    """The sweep of one problem's HBVM(k, s) stepper on the nonzeros of G (``Problem.sparse``)."""

    def __init__(self, tab, problem) -> None:
        self.tab, self.problem = tab, problem
        self.structure = problem.sparse
        self.dinv = inverse_mass(problem)
        self.dinv_nz = self.dinv[self.structure.rows]  # D at the row of each nonzero
        self.normal = self.structure.normal
        self.factor = self.structure.factorisation
        self.size = 0.0
        G0 = self.structure.values(problem.q0[None, :])
        self.amplification = float(
            np.sqrt(condition(self.normal, self.factor, self.normal.data(G0, G0 * self.dinv_nz)))
        )

    def sweep(self, q0, p0, Mp0, h, gamma):
        """One fixed-point sweep gamma -> gamma_new; aux = (lam, psi_0, rho_0 values, Q)."""
        tab, pb, S = self.tab, self.problem, self.structure
        Q = q0 + h * (tab.Ihat @ gamma)  # stage positions (k, m)
        psi = tab.W.T @ pb.grad_U(Q)  # (s, m)
        XMpsi = tab.X @ (psi * self.dinv)
        new = -h * XMpsi
        new[0] += Mp0
        rho = tab.W.T @ S.values(Q)  # (s, nnz)
        XMrho = tab.X @ (rho * self.dinv_nz)
        A = h * self.normal.data(rho, XMrho)
        b = S.Gt_dot(rho[:1], Mp0)[0] - h * S.Gt_dot(rho, XMpsi).sum(axis=0)
        lam = self.factor.solve(A, b)
        new -= h * S.G_dot(XMrho, lam)
        terms = S.G_dot(np.abs(XMrho), np.abs(lam))  # before the tensions of neighbouring rods cancel
        self.size = h * max(float(np.max(terms)), float(np.max(np.abs(XMpsi))))
        return new, (lam, psi[0], rho[0], Q)

    def terms(self) -> tuple[float, float]:
        """The largest term the last sweep summed into gamma (h X M^-1 rho lam, h X M^-1 psi), and that times
        sqrt(cond(G^T M^-1 G)) at q0: the scales of gamma's round-off (``fixed_point.fixed_point``). An error
        eps |b| / lambda_min of lam moves G lam by eps |b| / sqrt(lambda_min), i.e. eps sqrt(cond) times the
        terms."""
        return self.size, self.size * self.amplification

    def constraint_force(self, rho0: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """rho_0 lam from rho_0's nonzeros."""
        return self.structure.G_dot(rho0[None, :], lam)[0]
