"""HBVM(k, s) with a polynomial multiplier of degree s-1 per step (METHOD.md section 6).

lambda(t_n + c h) = sum_{i<s} P_i(c) lambda_i. With R_ji = sum_l b_l P_j(c_l) P_i(c_l) G(Q_l),
phi_j = sum_i R_ji lambda_i and X the tridiagonal X_s of section 2:

    gamma_i = M^{-1} [ delta_i0 p0 - h sum_r X[i,r] (psi_r + phi_r) ]
    C_j = sum_i R_ji^T gamma_i = 0,   j = 0..s-1          (linear in lambda for fixed stages)
    q1 = q0 + h gamma_0,   p1 = p0 - h (psi_0 + phi_0)

``projection=True`` adds the energy-preserving projection of p1 onto the hidden
constraint after each step: mu = (G1^T M^{-1} G1)^{-1} G1^T M^{-1} p1, pp = p1 - G1 mu,
p1 <- sqrt(T(p1) / T(pp)) pp (T the kinetic energy, G1 = G(q1)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError, ConvergenceError
from ..legendre import Tableau, shifted_legendre, tableau
from ..problem import Problem
from ..solvers import StoppingRule, fixed_point
from ._small import solve_small

WARM_STARTS = ("extrapolate", "previous", "p0")


@dataclass(frozen=True)
class PolynomialHBVM:
    """HBVM(k, s) with lambda a polynomial of degree s-1 on each step (k >= s >= 1), optionally projected.

    For s = 1 this is the constant-multiplier HBVM(k, 1) (METHOD.md 6).
    """

    k: int
    s: int
    projection: bool = False
    warm_start: str = "extrapolate"
    rule: StoppingRule = field(default_factory=StoppingRule)

    def __post_init__(self) -> None:
        tableau(self.k, self.s)  # validates k, s
        if not isinstance(self.projection, bool):
            raise ConfigError(f"projection = {self.projection!r}: expected true or false")
        if self.warm_start not in WARM_STARTS:
            raise ConfigError(f"warm_start = {self.warm_start!r}: expected one of {', '.join(WARM_STARTS)}")

    @property
    def name(self) -> str:
        return f"HBVM({self.k},{self.s})-poly" + ("-proj" if self.projection else "")

    @property
    def tableau(self) -> Tableau:
        return tableau(self.k, self.s)

    def attrs(self) -> dict:
        return {
            "method": "hbvm",
            "k": self.k,
            "s": self.s,
            "multiplier": "polynomial",
            "projection": self.projection,
            "solver": "fixed-point",
            "warm_start": self.warm_start,
            "rtol": self.rule.rtol,
            "max_iter": self.rule.max_iter,
        }

    def stepper(self, problem: Problem) -> PolynomialStepper:
        return PolynomialStepper(self, problem)


class PolynomialStepper:
    """One step of the polynomial-multiplier HBVM(k, s) at a time; keeps the warm start between steps."""

    def __init__(self, method: PolynomialHBVM, problem: Problem):
        self.method = method
        self.problem = problem
        self.tab = method.tableau
        s = self.tab.s
        #: B[l, j, i] = b_l P_j(c_l) P_i(c_l): the quadrature weights of R_ji.
        self.B = np.einsum("lj,li->lji", self.tab.W, self.tab.Phat)
        #: P_i(0), to report lambda(t_n) = sum_i P_i(0) lambda_i.
        self.P0 = shifted_legendre(s - 1, np.zeros(1))[0]
        self.gamma: np.ndarray | None = None

    def _minv(self, x: np.ndarray) -> np.ndarray:
        """M^{-1} along axis 1 of x (shape (a, m) or (a, m, r))."""
        pb = self.problem
        if pb._chol is None:
            return x
        if x.ndim == 2:
            return pb.minv_rows(x[:, :, None])[:, :, 0]
        return pb.minv_rows(x)

    def sweep(self, q0, Mp0, h, gamma):
        """One fixed-point sweep gamma -> gamma_new; aux = (lambda_i (s, nu), psi_0, phi_0)."""
        tab, pb = self.tab, self.problem
        s, nu = tab.s, pb.nu
        Q = q0 + h * (tab.Ihat @ gamma)  # stage positions (k, m)
        psi = tab.W.T @ pb.grad_U(Q)  # (s, m)
        XMpsi = tab.X @ self._minv(psi)  # (s, m): sum_r X[i,r] M^{-1} psi_r
        new = -h * XMpsi
        new[0] += Mp0
        if nu == 0:
            return new, (np.zeros((s, 0)), psi[0], np.zeros_like(psi[0]))
        R = np.einsum("lji,lmn->jimn", self.B, pb.G(Q))  # R[j, i] (m, nu)
        MR = self._minv(R.reshape(s * s, pb.m, nu)).reshape(R.shape)
        XMR = np.einsum("ir,rnmb->inmb", tab.X, MR)  # sum_r X[i,r] M^{-1} R_rn
        # C_j = sum_i R_ji^T gamma_i = 0  ->  A lambda = rhs, unknowns ordered (n, b).
        A = h * np.einsum("jima,inmb->janb", R, XMR).reshape(s * nu, s * nu)
        rhs = np.einsum("jma,m->ja", R[:, 0], Mp0) - h * np.einsum("jima,im->ja", R, XMpsi)
        lam = solve_small(A, rhs.reshape(-1)).reshape(s, nu)
        new -= h * np.einsum("inmb,nb->im", XMR, lam)
        phi0 = np.einsum("imb,ib->m", R[0], lam)
        return new, (lam, psi[0], phi0)

    def initial_guess(self, Mp0: np.ndarray) -> np.ndarray:
        warm = self.method.warm_start
        if self.gamma is None or warm == "p0":
            gamma = np.zeros((self.tab.s, self.problem.m))
            gamma[0] = Mp0
            return gamma
        return self.tab.E @ self.gamma if warm == "extrapolate" else self.gamma.copy()

    def step(self, q0: np.ndarray, p0: np.ndarray, h: float, n: int = 0, t: float = 0.0):
        """Advance (q0, p0) by h; returns (dq, dp, lambda(t_n), iterations); dp includes the projection."""
        pb = self.problem
        Mp0 = pb.minv(p0)
        gamma = self.initial_guess(Mp0)
        try:
            with np.errstate(all="ignore"):
                gamma, aux, iters = fixed_point(lambda gm: self.sweep(q0, Mp0, h, gm), gamma, self.method.rule, n, t)
        except np.linalg.LinAlgError as exc:
            raise ConvergenceError(n, t, float("nan"), 0, f"singular multiplier system ({exc})") from None
        except ConvergenceError:
            Q = q0 + h * (self.tab.Ihat @ gamma)
            if np.all(np.isfinite(Q)):
                pb.check_finite(Q)  # names a callback returning NaN/inf, if any
            raise
        lam, psi0, phi0 = aux
        self.gamma = gamma
        dq = h * gamma[0]
        dp = -h * (psi0 + phi0)
        if self.method.projection and pb.nu:
            p1 = project_momentum(pb, q0 + dq, p0 + dp, preserve_kinetic=True)
            dp = p1 - p0
        return dq, dp, self.P0 @ lam, iters


def project_momentum(problem: Problem, q1: np.ndarray, p1: np.ndarray, preserve_kinetic: bool) -> np.ndarray:
    """p1 - G1 mu with G1^T M^{-1} (p1 - G1 mu) = 0; rescaled to the kinetic energy of p1 if asked (METHOD.md 6)."""
    G1 = problem.G(q1[None, :])[0]
    MG = problem.minv(G1)
    Mp = problem.minv(p1)
    mu = solve_small(G1.T @ MG, G1.T @ Mp)
    pp = p1 - G1 @ mu
    if not preserve_kinetic:
        return pp
    Tpp = pp @ problem.minv(pp)
    if Tpp <= 0.0:
        return pp
    return np.sqrt((p1 @ Mp) / Tpp) * pp
