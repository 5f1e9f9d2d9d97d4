"""HBVM(k, s) with a polynomial multiplier of degree s-1 per step (docs/method.md section 6).

lambda(t_n + c h) = sum_{i<s} P_i(c) lambda_i. With R_ji = sum_l b_l P_j(c_l) P_i(c_l) G(Q_l),
phi_j = sum_i R_ji lambda_i and X the tridiagonal X_s of section 2:

    gamma_i = M^{-1} [ delta_i0 p0 - h sum_r X[i,r] (psi_r + phi_r) ]
    C_j = sum_i R_ji^T gamma_i = 0,   j = 0..s-1          (linear in lambda for fixed stages)
    q1 = q0 + h gamma_0,   p1 = p0 - h (psi_0 + phi_0)

``projection=True`` adds the energy-preserving projection of p1 onto the hidden
constraint after each step: mu = (G1^T M^{-1} G1)^{-1} G1^T M^{-1} p1, pp = p1 - G1 mu,
p1 <- sqrt(T(p1) / T(pp)) pp (T the kinetic energy, G1 = G(q1)), computed as an
increment to p0 (``projected_increment``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, ConvergenceError
from ..fixed_point import StoppingRule, fixed_point
from ..kernels.description import LoopDescription
from ..legendre import shifted_legendre
from ..problem import Problem
from ._small import solve_small
from .base import only_keys
from .hbvm import HBVM_REASONS, HBVMBase, initial_gamma


@dataclass(frozen=True)
class PolynomialHBVM(HBVMBase):
    """HBVM(k, s) with lambda a polynomial of degree s-1 on each step (k >= s >= 1), optionally projected.

    For s = 1 this is the constant-multiplier HBVM(k, 1) (docs/method.md 6). Fixed-point sweeps only.
    """

    multiplier: ClassVar[str] = "polynomial"
    solver: ClassVar[str] = "fixed-point"
    #: the compiled loop (kernels/description.py): template kernels/polynomial.py; no carried multiplier (the
    #: ensemble's block reads the last step's from its step row); its lockstep form is kernels/polynomial_lanes.py's
    LOOP: ClassVar[LoopDescription] = LoopDescription(
        template="polynomial",
        callbacks=("grad_U", "G"),
        runner="PolynomialRunner",
        forms=frozenset({"loop", "block", "lanes", "cuda"}),
        reasons=HBVM_REASONS,
        lanes="hbvm_core.kernels.polynomial_lanes",
        warm={"polynomial": ("HBVM polynomial", {"method": "hbvm", "k": 2, "s": 2, "multiplier": "polynomial"})},
    )
    numerics_sources: ClassVar[tuple[str, ...]] = (
        "methods/polynomial.py", "methods/hbvm.py", "methods/_small.py", "legendre.py", "fixed_point.py",
        "blended.py", "integrate.py", "kernels/polynomial.py", "kernels/driver.py", "kernels/rules.py",
        "kernels/linalg.py", "kernels/lanes.py", "kernels/lane_forms.py", "kernels/polynomial_lanes.py",
    )  # fmt: skip
    COMPILED_NEEDS: ClassVar[frozenset[str] | None] = frozenset({"G"})
    EXAMPLES: ClassVar[tuple[dict, ...]] = (
        {"k": 6, "s": 3, "multiplier": "polynomial"},
        {"k": 6, "s": 3, "multiplier": "polynomial", "projection": True},
    )

    k: int
    s: int
    projection: bool = False
    warm_start: str = "extrapolate"
    rule: StoppingRule = field(default_factory=StoppingRule)

    @property
    def orders(self) -> dict[str, float | None]:
        """Plain: 2 ceil(s/2) in q and p, one less in lambda (measured: 1, 1, 3, 3 for s = 1..4); projected: 2s
        in q and p, s in lambda (docs/method.md 6)."""
        if self.projection:
            return {"q": 2 * self.s, "p": 2 * self.s, "lam": self.s}
        order = 2 * ((self.s + 1) // 2)
        return {"q": order, "p": order, "lam": order - 1}

    @property
    def conserves(self) -> frozenset[str]:
        """H and g (where the quadrature is exact, docs/method.md 6); with the projection the hidden constraint too."""
        return frozenset({"H", "g", "hidden"} if self.projection else {"H", "g"})

    @property
    def summary(self) -> str:
        if self.projection:
            return (
                "the same with the energy-preserving projection after each step (method.md section 6): "
                "measured 2.0, 4.0, 6.0, 8.0 in q and p for s = 1..4"
            )
        return (
            "HBVM(k,s) with a multiplier of degree s-1 per step (method.md section 6): measured 2, 2, 4, 4 in q "
            "and p for s = 1..4 on the planar pendulum; for s = 1 it is HBVM(k,1) to round-off"
        )

    def _check_options(self) -> None:
        if not isinstance(self.projection, bool):
            raise ConfigError(f"projection = {self.projection!r}: expected true or false")

    def _name_suffix(self) -> str:
        return "-poly" + ("-proj" if self.projection else "")

    def _extra_attrs(self) -> dict:
        return {"projection": self.projection}

    @classmethod
    def from_variant_entry(cls, entry: dict) -> PolynomialHBVM:
        entry = dict(entry)
        solver = entry.pop("solver", "fixed-point")
        if solver != "fixed-point":
            raise ConfigError(f"solver = {solver!r}: multiplier: polynomial supports only fixed-point")
        only_keys(entry, {"k", "s", "projection", "warm_start"}, "HBVM with a polynomial multiplier")
        return cls(**entry)

    def stepper(self, problem: Problem) -> PolynomialStepper:
        return PolynomialStepper(self, problem)

    def compiled_runner(self, problem: Problem):
        """The compiled (numba) time loop for problems with compiled callbacks and nu >= 1 (any M), else None."""
        if problem.kernels is None or problem.kernels.G is None or problem.nu == 0:
            return None
        return self.LOOP.runner_class()(self, problem)


class PolynomialStepper:
    """One step of the polynomial-multiplier HBVM(k, s) at a time; keeps the warm start between steps."""

    def __init__(self, method: PolynomialHBVM, problem: Problem):
        self.method = method
        self.problem = problem
        self.tab = method.tableau
        s = self.tab.s
        #: Bf[(j, i), l] = b_l P_j(c_l) P_i(c_l): the quadrature weights of R_ji (symmetric in j, i).
        self.Bf = np.einsum("lj,li->jil", self.tab.W, self.tab.Phat).reshape(s * s, self.tab.k)
        #: P_i(0), to report lambda(t_n) = sum_i P_i(0) lambda_i.
        self.P0 = shifted_legendre(s - 1, np.zeros(1))[0]
        self.gamma: np.ndarray | None = None

    def sweep(self, q0, Mp0, h, gamma):
        """One fixed-point sweep gamma -> gamma_new; aux = (lambda_i (s, nu), psi_0, phi_0).

        With the block matrix RR[(i, m), (n, b)] = R_in[m, b] (R_in = R_ni) the step's relations are
        phi = RR lam, gamma = e_0 M^{-1} p0 - h (X (x) I) M^{-1} (psi + phi) and C = RR^T gamma = 0.
        """
        tab, pb = self.tab, self.problem
        s, m, nu = tab.s, pb.m, pb.nu
        Q = q0 + h * (tab.Ihat @ gamma)  # stage positions (k, m)
        psi = tab.W.T @ pb.grad_U(Q)  # (s, m)
        Mpsi = psi if pb._chol is None else pb.minv(psi.T).T
        XMpsi = tab.X @ Mpsi  # (s, m): sum_r X[i,r] M^{-1} psi_r
        new = -h * XMpsi
        new[0] += Mp0
        if nu == 0:
            return new, (np.zeros((s, 0)), psi[0], np.zeros(m))
        Gq = pb.G(Q)  # (k, m, nu)
        R = (self.Bf @ Gq.reshape(tab.k, m * nu)).reshape(s, s, m, nu)  # R[i, n] = sum_l b_l P_i P_n G_l
        RR = R.transpose(0, 2, 1, 3).reshape(s * m, s * nu)
        MRR = RR if pb._chol is None else pb.minv(RR.reshape(s, m, s * nu).transpose(1, 0, 2).reshape(m, -1))
        if pb._chol is not None:
            MRR = MRR.reshape(m, s, s * nu).transpose(1, 0, 2).reshape(s * m, s * nu)
        XMRR = (tab.X @ MRR.reshape(s, m * s * nu)).reshape(s * m, s * nu)  # (X (x) I) M^{-1} RR
        A = h * (RR.T @ XMRR)
        rhs = RR[:m].T @ Mp0 - h * (RR.T @ XMpsi.reshape(-1))
        lam = solve_small(A, rhs)
        new -= h * (XMRR @ lam).reshape(s, m)
        phi0 = RR[:m] @ lam
        return new, (lam.reshape(s, nu), psi[0], phi0)

    def initial_guess(self, Mp0: np.ndarray) -> np.ndarray:
        return initial_gamma(self.tab, self.method.warm_start, self.gamma, Mp0)

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
            pb.check_finite(q0 + h * (self.tab.Ihat @ gamma), n, t)  # names a callback returning NaN/inf, if any
            raise
        lam, psi0, phi0 = aux
        self.gamma = gamma
        dq = h * gamma[0]
        dp = -h * (psi0 + phi0)
        if self.method.projection and pb.nu:
            dp = projected_increment(pb, q0 + dq, p0, dp)
        return dq, dp, self.P0 @ lam, iters


def project_momentum(problem: Problem, q1: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """p1 - G1 mu with G1^T M^{-1} (p1 - G1 mu) = 0, G1 = G(q1): the M^{-1}-orthogonal projection."""
    G1 = problem.G(q1[None, :])[0]
    mu = solve_small(G1.T @ problem.minv(G1), G1.T @ problem.minv(p1))
    return p1 - G1 @ mu


def projected_increment(problem: Problem, q1: np.ndarray, p0: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """The increment to p0 of the energy-preserving projection of p1 = p0 + dp (docs/method.md 6).

    p0 + result = f (p1 - G1 mu) with mu from G1^T M^{-1} (p1 - G1 mu) = 0 and f = sqrt(T(p1) / T(p1 - G1 mu)).
    Written as (f - 1) p0 + f (dp - G1 mu) with f - 1 = (1 - x)^(-1/2) - 1 from expm1/log1p,
    x = (2 mu^T G1^T M^{-1} p1 - T(G1 mu)) / T(p1) (T(v) = v^T M^{-1} v), so that the increment is
    accurate to round-off of its own size: rounding p0 + dp would cost an ulp of p per step, and a
    linear drift of H at round-off level over long runs.
    """
    G1 = problem.G(q1[None, :])[0]
    p1 = p0 + dp
    Mp = problem.minv(p1)
    mu = solve_small(G1.T @ problem.minv(G1), G1.T @ Mp)
    Gmu = G1 @ mu
    T1 = p1 @ Mp
    if not T1 > 0.0:
        return dp - Gmu
    x = (2.0 * (Gmu @ Mp) - Gmu @ problem.minv(Gmu)) / T1
    fm1 = float(np.expm1(-0.5 * np.log1p(-x))) if x < 1.0 else 0.0
    return fm1 * p0 + (1.0 + fm1) * (dp - Gmu)
