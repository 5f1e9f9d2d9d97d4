"""The index-reduced ODE q' = M^{-1} p, p' = -grad U - G lambda(q, p) (docs/method.md 1) by scipy's DOP853.

A baseline, not an HBVM: the step h of the time loop is the *output* spacing;
inside each output interval DOP853 adapts its own steps to rtol, atol (the
shell it shares with IDA: ``continuous``).

- projection=False: one continuous integration; the state at t_n + h is taken
  from the solver's dense output (as solve_ivp does with t_eval).
- projection=True: after each output step q is projected onto g = 0 (Newton on
  q <- q - M^{-1} G (G^T M^{-1} G)^{-1} g) and p onto the hidden constraint
  G^T M^{-1} p = 0; the integration restarts from the projected state (with
  the last step size as its first step).

iterations = right-hand-side evaluations spent in the output step;
lam = lambda(q_n, p_n), the exact multiplier at the step's starting point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, ConvergenceError
from ..fixed_point import StoppingRule
from ..problem import Problem
from ._small import solve_small
from .base import BOOLEAN, EntryKey
from .continuous import ContinuousMethod, OutputGridStepper
from .polynomial import project_momentum


@dataclass(frozen=True)
class DOP853(ContinuousMethod):
    """DOP853 on the index-reduced ODE at tolerance rtol (atol defaults to rtol), optionally projected."""

    rtol: float = 1e-8
    atol: float | None = None
    projection: bool = False
    rule: StoppingRule = field(default_factory=StoppingRule)

    method_name: ClassVar[str] = "dop853"
    SOLVER: ClassVar[str] = "DOP853"
    numerics_sources: ClassVar[tuple[str, ...]] = (
        "methods/index_reduced.py", "methods/continuous.py", "methods/polynomial.py", "methods/_small.py",
        "fixed_point.py", "kernels/rules.py", "integrate.py",
    )  # fmt: skip
    ENTRY_KEYS: ClassVar[dict[str, EntryKey]] = {
        **ContinuousMethod.ENTRY_KEYS,
        "projection": EntryKey(BOOLEAN, False, "project onto g = 0 and the hidden constraint after each output step"),
    }
    EXAMPLES: ClassVar[tuple[dict, ...]] = (
        {"method": "dop853", "rtol": 1e-8, "atol": 1e-8, "projection": False},
        {"method": "dop853", "rtol": 1e-8, "projection": True},
    )
    SUMMARY: ClassVar[str] = (
        "the index-reduced ODE (the exact multiplier lambda(q, p) of method.md section 1) by scipy's DOP853 at "
        "that tolerance (atol defaults to rtol); the study's h is the output step"
    )

    @property
    def conserves(self) -> frozenset[str]:
        """With the projection, g and the hidden constraint (each output step ends on them); else nothing."""
        return frozenset({"g", "hidden"} if self.projection else ())

    @property
    def summary(self) -> str:
        if self.projection:
            return (
                "the same, projected onto g = 0 and the hidden constraint after each output step, the ODE "
                "restarted there"
            )
        return self.SUMMARY

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.projection, bool):
            raise ConfigError(f"projection = {self.projection!r}: expected true or false")

    def _name_suffix(self) -> str:
        return "-proj" if self.projection else ""

    def attrs(self) -> dict:
        return super().attrs() | {"projection": self.projection}

    def entry(self) -> dict:
        entry = super().entry()
        if self.projection:
            entry["projection"] = True
        return entry

    def make_stepper(self, problem: Problem) -> DOP853Stepper:
        return DOP853Stepper(self, problem)


class DOP853Stepper(OutputGridStepper):
    """Advances the index-reduced ODE by one output interval per call."""

    def __init__(self, method: DOP853, problem: Problem):
        super().__init__(method, problem)
        self.dense = None  # dense output of the solver's last step, built on demand
        self.first_step: float | None = None

    def _start(self, t: float, y: np.ndarray, t_bound: float) -> None:
        rtol, atol = self.method.tolerances
        first = None if self.first_step is None else min(self.first_step, t_bound - t)
        from scipy.integrate import DOP853  # here: scipy.integrate costs a second to import

        self.solver = DOP853(self.problem.index_reduced_rhs, t, y, t_bound, rtol=rtol, atol=atol, first_step=first)
        self.dense = None

    def _advance(self, T: float, n: int, t: float) -> np.ndarray:
        """The solution at time T, stepping the solver past T if needed."""
        sol = self.solver
        while sol.t < T and not math.isclose(sol.t, T, rel_tol=1e-14, abs_tol=1e-14 * abs(T)):
            msg = sol.step()
            self.dense = None
            if sol.status == "failed" or not np.all(np.isfinite(sol.y)):
                self.problem.check_finite(sol.y[None, : self.problem.m], n, t)  # a callback not finite there
                raise ConvergenceError(n, t, float("nan"), sol.nfev, f"DOP853 failed ({msg or 'non-finite state'})")
        if math.isclose(sol.t, T, rel_tol=1e-14, abs_tol=1e-14 * abs(T)):
            return sol.y.copy()
        if self.dense is None:
            self.dense = sol.dense_output()
        return self.dense(T)

    def step(self, q0: np.ndarray, p0: np.ndarray, h: float, n: int = 0, t: float = 0.0):
        """Advance by the output step h; returns (dq, dp, lambda(q0, p0), RHS evaluations)."""
        pb = self.problem
        self.check_forward(h)
        y0 = np.concatenate([q0, p0])
        T = t + h
        restart = self.method.projection or self.must_restart(y0, n)
        nfev0 = 0 if restart else self.solver.nfev
        if restart:
            self._start(t, y0, T if self.method.projection else math.inf)
        y1 = self._advance(T, n, t)
        iterations = self.solver.nfev - nfev0
        q1, p1 = y1[: pb.m], y1[pb.m :]
        if self.method.projection and pb.nu:
            q1 = project_position(pb, q1, self.method.rule, n, t)
            p1 = project_momentum(pb, q1, p1)
            self.first_step = float(self.solver.h_abs) if np.isfinite(self.solver.h_abs) else None
        return self.finish(q0, p0, q1, p1, iterations)


def project_position(problem: Problem, q: np.ndarray, rule: StoppingRule, n: int = 0, t: float = 0.0) -> np.ndarray:
    """Newton (Gauss-Newton) onto g = 0 along M^{-1} G: q <- q - M^{-1} G (G^T M^{-1} G)^{-1} g(q)."""
    d_prev = np.inf
    for it in range(1, rule.max_iter + 1):
        Q = q[None, :]
        G = problem.G(Q)[0]
        MG = problem.minv(G)
        dq = -MG @ solve_small(G.T @ MG, problem.g(Q)[0])
        q = q + dq
        d = float(np.max(np.abs(dq)))
        if not np.isfinite(d):
            raise ConvergenceError(n, t, d, it, "projection onto g = 0 diverged")
        if d == 0.0 or rule.done(d, d_prev, max(1.0, float(np.max(np.abs(q))))):
            return q
        d_prev = d
    raise ConvergenceError(n, t, d, rule.max_iter, "projection onto g = 0 did not converge")
