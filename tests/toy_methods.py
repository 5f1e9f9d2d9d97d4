"""A method added from outside hbvm_core: explicit Euler on the index-reduced ODE (docs/method.md 1).

One module and one registry line (the last line), nothing else: a study loads it with the config key
``method_modules: [tests.toy_methods]`` (tests/workflow/test_toy_method.py runs one through Snakemake).

    q1 = q0 + h M^{-1} p0,    p1 = p0 - h (grad U(q0) + G(q0) lambda(q0, p0))

First order in q, p and lambda (lam = lambda(q_n, p_n)); it conserves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hbvm_core.methods import METHODS, Method


@dataclass(frozen=True)
class ExplicitEuler(Method):
    """Explicit Euler on q' = M^{-1} p, p' = -grad U - G lambda(q, p)."""

    method_name: ClassVar[str] = "euler"
    NEEDS: ClassVar[frozenset[str]] = frozenset({"d2g"})
    orders: ClassVar[dict[str, float | None]] = {"q": 1, "p": 1, "lam": 1}
    EXAMPLES: ClassVar[tuple[dict, ...]] = ({"method": "euler"},)
    SUMMARY: ClassVar[str] = "explicit Euler on the index-reduced ODE (a test's toy method)"

    @property
    def name(self) -> str:
        return "Euler"

    def attrs(self) -> dict:
        return {"method": self.method_name}

    def entry(self) -> dict:
        return {"method": self.method_name}

    def stepper(self, problem):
        self.check_problem(problem)
        return EulerStepper(problem)


class EulerStepper:
    def __init__(self, problem):
        self.problem = problem

    def step(self, q0: np.ndarray, p0: np.ndarray, h: float, n: int = 0, t: float = 0.0):
        """(dq, dp, lambda(q0, p0), 1)."""
        pb = self.problem
        Q, P = q0[None, :], p0[None, :]
        force = pb.grad_U(Q)[0]
        lam = np.zeros(0)
        if pb.nu:
            lam = pb.multiplier(Q, P)[0]
            force = force + pb.G(Q)[0] @ lam
        return h * pb.minv(p0), -h * force, lam, 1


METHODS["euler"] = ExplicitEuler
