"""The fixed-point HBVM(k, s) sweep on a sparse G (docs/method.md 3), O(k m + s nnz) per sweep.

rho_j = sum_i b_i P_j(c_i) G(Q_i) share G's pattern, so the stack rho is an (s, nnz) array of values; with
D = M^-1 diagonal,

    A   = h sum_{j,l} X[j, l] rho_j^T D rho_l          (assembled over the pattern of G^T D G, ``normal``)
    b   = sum_j rho_j^T y_j,   y = e_0 D p0 - h X D psi
    gamma = y - h X D rho lam

and A lam = b is solved by ``factor.Factorisation`` (ordering found once per pattern). The time loop, warm
start and stopping rule are the dense stepper's (``methods.hbvm.HBVMStepper``), which hands its sweeps here.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from . import compiled
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


def amplification(problem, dinv_nz) -> float:
    """sqrt(cond(G^T M^-1 G)) at q0 (``condition``): kept on the structure for the last (q0, M) asked, so the
    steppers of one problem (a run's chunks, repeated runs) estimate it once."""
    S = problem.sparse
    key = problem.q0.tobytes() + dinv_nz.tobytes()
    last = getattr(S, "_amplification", None)
    if last is None or last[0] != key:
        G0 = S.values(problem.q0[None, :])
        last = S._amplification = (
            key,
            float(np.sqrt(condition(S.normal, S.factorisation, S.normal.data(G0, G0 * dinv_nz)))),
        )
    return last[1]


class SparseSweep:
    """The sweep of one problem's HBVM(k, s) stepper on the nonzeros of G (``Problem.sparse``)."""

    def __init__(self, tab, problem, kind: str | None = None) -> None:
        """``kind``: "numpy", "compiled" (``compiled.FusedSweep``: one numba function per sweep) or None / "auto"
        (the switch ``HBVM_SPARSE_SWEEP``, auto when unset: compiled where it applies and numba imports)."""
        self.tab, self.problem = tab, problem
        self.structure = problem.sparse
        self.dinv = inverse_mass(problem)
        self.dinv_nz = self.dinv[self.structure.rows]  # D at the row of each nonzero
        self.normal = self.structure.normal
        self.factor = self.structure.factorisation
        self.size = 0.0
        self.amplification = amplification(problem, self.dinv_nz)
        self.kind, self.fused, self._next = "numpy", None, None
        kind = compiled.choice() if kind in (None, "auto") else kind
        if kind not in compiled.CHOICES:
            raise ConfigError(f"sparse sweep = {kind!r}: expected one of {', '.join(compiled.CHOICES)}")
        if kind != "numpy" and compiled.applies(self.factor) and compiled.fused_sweep() is not None:
            self.kind, self.fused = "compiled", compiled.FusedSweep(self)
            self.sweep = self.fused_sweep
        elif kind == "compiled":
            why = "numba is not installed" if compiled.fused_sweep() is None else "G^T M^-1 G is not tridiagonal"
            raise ConfigError(f"{compiled.SWITCH} = compiled: {why} (the numpy sweep runs with numpy or auto)")

    def fused_sweep(self, q0, p0, Mp0, h, gamma):
        """``sweep`` with its work after the callbacks in one compiled function (``compiled``), which also returns
        the stage points of gamma_new: the next sweep's when the fixed point iterates on (gamma is that array)."""
        last = self._next
        if last is not None and gamma is last[0] and q0 is last[1] and h == last[2]:
            Q = last[3]
        else:
            Q = q0 + h * (self.tab.Ihat @ gamma)  # stage positions (k, m)
        pb = self.problem
        new, lam, psi0, rho0, self.size, Qn = self.fused(pb.grad_U(Q), self.structure.values(Q), q0, Mp0, h)
        self._next = (new, q0, h, Qn)
        return new, (lam, psi0, rho0, Q)

    def sweep(self, q0, p0, Mp0, h, gamma):
        """One fixed-point sweep gamma -> gamma_new; aux = (lam, psi_0, rho_0 values, Q).

        With y the stage terms without the constraint (y_0 = M^-1 p0 - h (X M^-1 psi)_0, y_j = -h (X M^-1 psi)_j):
        b = sum_j rho_j^T y_j, A lam = b, gamma_new = y - h X M^-1 rho lam."""
        tab, pb, S, s = self.tab, self.problem, self.structure, self.tab.s
        Q = q0 + h * (tab.Ihat @ gamma)  # stage positions (k, m)
        psi = tab.W.T @ pb.grad_U(Q)  # (s, m)
        XMpsi = tab.X @ (psi * self.dinv)
        y = -h * XMpsi
        y[0] += Mp0
        rho = tab.W.T @ S.values(Q)  # (s, nnz)
        hXMrho = tab.X @ (rho * (h * self.dinv_nz))
        b = np.bincount(S.cols, np.einsum("jp,jp->p", rho, y.take(S.rows, axis=1)), S.nu)
        lam = self.factor.solve(self.normal.data(rho, hXMrho), b)
        # h X M^-1 rho lam, and its terms' size |h X M^-1 rho lam| summed before the tensions of neighbours cancel
        w = hXMrho * lam.take(S.cols)
        both = S.scatter_rows(np.concatenate([w, np.abs(w)]))
        self.size = max(float(np.max(both[s:])), h * float(np.max(np.abs(XMpsi))))
        return y - both[:s], (lam, psi[0], rho[0], Q)

    def terms(self) -> tuple[float, float]:
        """The largest term the last sweep summed into gamma (h X M^-1 rho lam, h X M^-1 psi), and that times
        sqrt(cond(G^T M^-1 G)) at q0: the scales of gamma's round-off (``fixed_point.fixed_point``). An error
        eps |b| / lambda_min of lam moves G lam by eps |b| / sqrt(lambda_min), i.e. eps sqrt(cond) times the
        terms."""
        return self.size, self.size * self.amplification

    def constraint_force(self, rho0: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """rho_0 lam from rho_0's nonzeros."""
        return self.structure.G_dot(rho0[None, :], lam)[0]
