"""A RATTLE step (``methods.rattle``) on a sparse G: the Newton matrix G(q1)^T M^-1 G(q0) and the velocity
system G(q1)^T M^-1 G(q1) assembled over the pattern of G^T M^-1 G (``normal``) and solved by
``factor.Factorisation``; O(m + nnz) per Newton iteration."""

from __future__ import annotations

import numpy as np

from ..errors import ConvergenceError
from .path import inverse_mass


class SparseRattle:
    """One problem's RATTLE step on the nonzeros of G (``Problem.sparse``); the stepper keeps lam."""

    def __init__(self, problem, rule) -> None:
        self.problem, self.rule = problem, rule
        self.structure = problem.sparse
        self.dinv = inverse_mass(problem)
        self.dinv_nz = self.dinv[self.structure.rows]

    def _solve(self, left, right, rhs, n, t, it):
        S = self.structure
        try:
            return S.factorisation.solve(S.normal.data(left[None, :], right[None, :]), rhs)
        except np.linalg.LinAlgError as exc:
            raise ConvergenceError(n, t, float("nan"), it, f"singular Newton matrix ({exc})") from None

    def step(self, q0: np.ndarray, p0: np.ndarray, h: float, lam: np.ndarray, n: int = 0, t: float = 0.0):
        """Advance (q0, p0) by h from the multiplier guess lam; returns (dq, dp, lam, Newton iterations)."""
        pb, rule, S = self.problem, self.rule, self.structure
        f0 = pb.grad_U(q0[None, :])[0]
        G0 = S.values(q0[None, :])[0]
        MG0 = G0 * self.dinv_nz
        qfree = q0 + h * self.dinv * (p0 - 0.5 * h * f0)  # q1 without the constraint force
        c = 0.5 * h * h
        d_prev = np.inf
        with np.errstate(all="ignore"):
            for it in range(1, rule.max_iter + 1):
                q1 = qfree - c * S.G_dot(MG0[None, :], lam)[0]
                Q1 = q1[None, :]
                r = pb.g(Q1)[0]
                dlam = self._solve(S.values(Q1)[0], MG0, r / c, n, t, it)  # J = -c G(q1)^T M^-1 G(q0)
                lam = lam + dlam
                d = float(np.max(np.abs(c * S.G_dot(MG0[None, :], dlam)[0])))  # change of q1
                if not np.isfinite(d):
                    pb.check_finite(Q1, n, t)
                    raise ConvergenceError(n, t, d, it, "non-finite Newton increment (diverged)")
                if rule.done(d, d_prev, max(1.0, float(np.max(np.abs(q1))))):
                    break
                d_prev = d
            else:
                raise ConvergenceError(n, t, d, rule.max_iter, "Newton on the position constraint did not converge")
        q1 = qfree - c * S.G_dot(MG0[None, :], lam)[0]
        Q1 = q1[None, :]
        ph = p0 - 0.5 * h * (f0 + S.G_dot(G0[None, :], lam)[0])
        p_star = ph - 0.5 * h * pb.grad_U(Q1)[0]
        G1 = S.values(Q1)[0]
        mu = self._solve(G1, G1 * self.dinv_nz, S.Gt_dot(G1[None, :], self.dinv * p_star)[0], n, t, 0) / (0.5 * h)
        p1 = p_star - 0.5 * h * S.G_dot(G1[None, :], mu)[0]
        return q1 - q0, p1 - p0, lam, it
