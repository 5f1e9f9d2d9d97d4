"""What the continuous baselines share: a solver with its own steps, sampled on the output grid t_n = n h.

DOP853 on the index-reduced ODE (``index_reduced``) and IDA on the stabilized
index-2 DAE (``ida``) adapt their steps to a tolerance (rtol, atol); the step
h of the time loop is only the output spacing. ``ContinuousMethod`` holds
what their method objects share (tolerances, name, attrs, entry and its
checks, the d2g that lambda(q, p) of docs/method.md 1 needs);
``OutputGridStepper`` the stepper's bookkeeping: continue the integration
while the time loop hands back the state it was given, restart it otherwise,
and report lam = lambda(q_n, p_n), the exact multiplier at the step's start.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ..errors import ConfigError
from ..problem import Problem
from .base import POSITIVE, EntryKey, Method, only_keys


def check_tolerance(key: str, value, solver: str) -> float:
    """A finite tolerance > 0 that ``solver`` can meet in double precision (>= 1e-14); ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{key} = {value!r}: expected a finite tolerance > 0")
    if value < 1e-14:
        raise ConfigError(f"{key} = {value!r}: below what {solver} can meet in double precision (>= 1e-14)")
    return float(value)


class ContinuousMethod(Method):
    """A continuous solver at tolerance rtol (atol defaults to rtol); a subclass is a frozen dataclass with
    the fields ``rtol`` and ``atol`` (and its own options), and gives ``SOLVER`` and ``make_stepper``."""

    #: the solver's display name (DOP853, IDA)
    SOLVER: ClassVar[str]
    ENTRY_KEYS: ClassVar[dict[str, EntryKey]] = {
        "rtol": EntryKey(POSITIVE, 1e-8, "relative tolerance"),
        "atol": EntryKey(POSITIVE, None, "absolute tolerance (default rtol)"),
    }
    #: lambda(q, p) of docs/method.md 1 (the reported multiplier, and DOP853's right-hand side)
    NEEDS: ClassVar[frozenset[str]] = frozenset({"d2g"})

    rtol: float
    atol: float | None

    def __post_init__(self) -> None:
        check_tolerance("rtol", self.rtol, self.SOLVER)
        if self.atol is not None:
            check_tolerance("atol", self.atol, self.SOLVER)

    @property
    def tolerances(self) -> tuple[float, float]:
        return float(self.rtol), float(self.rtol if self.atol is None else self.atol)

    @property
    def name(self) -> str:
        rtol, atol = self.tolerances
        tol = f"{rtol:.0e}" if atol == rtol else f"{rtol:.0e},{atol:.0e}"
        return f"{self.SOLVER}({tol})" + self._name_suffix()

    def _name_suffix(self) -> str:
        return ""

    def attrs(self) -> dict:
        rtol, atol = self.tolerances
        return {"method": self.method_name, "rtol": rtol, "atol": atol}

    def entry(self) -> dict:
        entry = {"method": self.method_name, "rtol": self.rtol}
        if self.atol is not None:
            entry["atol"] = self.atol
        return entry

    @classmethod
    def from_entry(cls, entry: dict) -> ContinuousMethod:
        only_keys(entry, set(cls.ENTRY_KEYS), cls.SOLVER)
        return cls(**entry)

    def stepper(self, problem: Problem, *args):
        """The per-problem stepper (``make_stepper``); ConfigError without the d2g that lambda(q, p) needs."""
        self.check_problem(problem)
        return self.make_stepper(problem, *args)

    def make_stepper(self, problem: Problem, *args):
        raise NotImplementedError


class OutputGridStepper:
    """One output interval per ``step``: the bookkeeping of a continuous integration sampled at t_n = n h."""

    def __init__(self, method: ContinuousMethod, problem: Problem):
        self.method = method
        self.problem = problem
        self.solver = None
        self.y_out: np.ndarray | None = None  # the state (q, p) this stepper returned last

    def check_forward(self, h: float) -> None:
        if h <= 0:
            raise ConfigError(f"h = {h!r}: the {self.method.SOLVER} baseline integrates forward only")

    def must_restart(self, y0: np.ndarray, n: int) -> bool:
        """Whether the integration starts afresh at y0: the first step, or a state other than the one returned."""
        return (
            self.solver is None
            or n == 0
            or self.y_out is None
            or np.max(np.abs(y0 - self.y_out)) > 1e-13 * (1.0 + np.max(np.abs(y0)))
        )

    def finish(self, q0: np.ndarray, p0: np.ndarray, q1: np.ndarray, p1: np.ndarray, iterations: int):
        """(dq, dp, lambda(q0, p0), iterations), remembering (q1, p1) as the state returned."""
        pb = self.problem
        lam = pb.multiplier(q0[None, :], p0[None, :])[0] if pb.nu else np.zeros(0)
        self.y_out = np.concatenate([q1, p1])
        return q1 - q0, p1 - p0, lam, int(iterations)
