"""RATTLE (SHAKE with velocity constraints): symplectic, symmetric, second order (Andersen 1983).

In docs/method.md's convention p' = -grad U - G lambda, one step from (q0, p0):

    p_half = p0 - h/2 (grad U(q0) + G(q0) lam)
    q1     = q0 + h M^{-1} p_half,            g(q1) = 0                 (Newton on lam)
    p1     = p_half - h/2 (grad U(q1) + G(q1) mu),  G(q1)^T M^{-1} p1 = 0  (linear in mu)

lam approximates lambda(t_n) (first order, like HBVM's constant multiplier); it
is the multiplier reported for the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConvergenceError
from ..fixed_point import StoppingRule
from ..kernels.description import LoopDescription
from ..kernels.rules import DIVERGED, NO_CONVERGENCE, NON_FINITE_STATE, SINGULAR
from ..problem import Problem
from ..sparse.path import sparse_path
from ..sparse.rattle import SparseRattle
from ._small import solve_small
from .base import Method

#: the RATTLE loop's failures by run_chunk's status code, worded as RattleStepper.step words them
RATTLE_REASONS = {
    NO_CONVERGENCE: "Newton on the position constraint did not converge",
    DIVERGED: "non-finite Newton increment (diverged)",
    SINGULAR: "singular Newton matrix (Singular matrix)",
    NON_FINITE_STATE: "non-finite state after the step",
}


@dataclass(frozen=True)
class RATTLE(Method):
    """RATTLE with the position constraint solved to round-off by Newton's method on lam."""

    rule: StoppingRule = field(default_factory=StoppingRule)

    method_name: ClassVar[str] = "rattle"
    numerics_sources: ClassVar[tuple[str, ...]] = (
        "methods/rattle.py", "methods/_small.py", "sparse/rattle.py", "sparse/structure.py",
        "sparse/normal.py", "sparse/factor.py", "sparse/path.py", "fixed_point.py", "integrate.py", "kernels/rattle.py",
        "kernels/driver.py", "kernels/rules.py", "kernels/linalg.py", "kernels/lanes.py", "kernels/rattle_lanes.py",
        "kernels/lane_forms.py",
    )  # fmt: skip
    COMPILED_NEEDS: ClassVar[frozenset[str] | None] = frozenset({"G", "g"})
    #: the compiled loop (kernels/description.py): template kernels/rattle.py, which also evaluates g; its Newton
    #: iterate of a failed step in the tail argument q_fail; its lockstep form is kernels/rattle_lanes.py's
    LOOP: ClassVar[LoopDescription] = LoopDescription(
        template="rattle",
        callbacks=("grad_U", "G", "g"),
        runner="RattleRunner",
        forms=frozenset({"loop", "block", "lanes", "cuda"}),
        reasons=RATTLE_REASONS,
        carried="lam",
        tail=("q_fail",),
        lanes="hbvm_core.kernels.rattle_lanes",
        warm={"rattle": ("RATTLE", {"method": "rattle"})},
    )
    #: compiled: about a microsecond per step, as HBVM's per node (hbvm_workflow.runs.Job.estimated_seconds)
    STEP_SECONDS: ClassVar[tuple[float | None, float]] = (1e-6, 1e-4)
    #: second order in q and p; lam approximates lambda(t_n) to first order
    orders: ClassVar[dict[str, float | None]] = {"q": 2, "p": 2, "lam": 1}
    conserves: ClassVar[frozenset[str]] = frozenset({"g", "hidden"})
    EXAMPLES: ClassVar[tuple[dict, ...]] = ({"method": "rattle"},)
    SUMMARY: ClassVar[str] = (
        "RATTLE: symplectic, second order; g and the hidden constraint solved to round-off by Newton's method "
        "on the multipliers"
    )

    @property
    def name(self) -> str:
        return "RATTLE"

    def attrs(self) -> dict:
        return {"method": "rattle", "rtol": self.rule.rtol, "max_iter": self.rule.max_iter}

    def entry(self) -> dict:
        return {"method": "rattle"}

    def stepper(self, problem: Problem) -> RattleStepper:
        """The numpy stepper (on the problem's sparse G where ``sparse.path`` says so)."""
        return RattleStepper(self, problem)

    def compiled_runner(self, problem: Problem):
        """The compiled (numba) loop when the problem's ``kernels`` give grad_U, and G and g where nu > 0, else None."""
        if not self.has_compiled(problem):
            return None
        return self.LOOP.runner_class()(self, problem)


class DenseRattle:
    """G as the (m, nu) array of ``Problem.G``, M^-1 by the problem's factor: the products and solves of one
    RATTLE step (``sparse.rattle.SparseRattle`` is the same on G's nonzeros)."""

    name = "dense"

    def __init__(self, problem: Problem) -> None:
        self.problem = problem

    def G(self, Q: np.ndarray) -> np.ndarray:
        """G at the one point Q (1, m), (m, nu)."""
        return self.problem.G(Q)[0]

    def minv(self, v: np.ndarray) -> np.ndarray:
        return self.problem.minv(v)

    def minv_G(self, G: np.ndarray) -> np.ndarray:
        return self.problem.minv(G)

    def times(self, G: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """G lam."""
        return G @ lam

    def newton(self, G1: np.ndarray, MG0: np.ndarray, r: np.ndarray, c: float) -> np.ndarray:
        """dlam with J dlam = -r, J = -c G(q1)^T M^-1 G(q0) = d g(q1) / d lam."""
        return solve_small(-c * (G1.T @ MG0), -r)

    def velocity(self, G1: np.ndarray, MG1: np.ndarray, v: np.ndarray) -> np.ndarray:
        """x with G1^T M^-1 G1 x = G1^T v."""
        return solve_small(G1.T @ MG1, G1.T @ v)


def rattle_step(pb: Problem, rule: StoppingRule, algebra, q0, p0, h: float, lam: np.ndarray, n: int, t: float):
    """One RATTLE step (the module's equations, nu > 0) from the multiplier guess lam, with G's products and
    solves those of ``algebra`` (``DenseRattle`` or ``sparse.rattle.SparseRattle``); Newton on lam to the
    round-off ``rule`` on the change of q1. Returns (dq, dp, lam, Newton iterations); ConvergenceError on
    failure, worded as ``RATTLE_REASONS``."""
    Q0 = q0[None, :]
    f0 = pb.grad_U(Q0)[0]
    G0 = algebra.G(Q0)
    MG0 = algebra.minv_G(G0)
    qfree = q0 + h * algebra.minv(p0 - 0.5 * h * f0)  # q1 without the constraint force
    c = 0.5 * h * h
    d_prev = np.inf
    with np.errstate(all="ignore"):
        for it in range(1, rule.max_iter + 1):
            q1 = qfree - c * algebra.times(MG0, lam)
            Q1 = q1[None, :]
            r = pb.g(Q1)[0]
            try:
                dlam = algebra.newton(algebra.G(Q1), MG0, r, c)
            except np.linalg.LinAlgError as exc:
                raise ConvergenceError(n, t, float("nan"), it, f"singular Newton matrix ({exc})") from None
            lam = lam + dlam
            d = float(np.max(np.abs(c * algebra.times(MG0, dlam))))  # change of q1
            if not np.isfinite(d):
                pb.check_finite(Q1, n, t)
                raise ConvergenceError(n, t, d, it, "non-finite Newton increment (diverged)")
            if rule.done(d, d_prev, max(1.0, float(np.max(np.abs(q1))))):
                break
            d_prev = d
        else:
            raise ConvergenceError(n, t, d, rule.max_iter, "Newton on the position constraint did not converge")
    q1 = qfree - c * algebra.times(MG0, lam)
    Q1 = q1[None, :]
    ph = p0 - 0.5 * h * (f0 + algebra.times(G0, lam))
    p_star = ph - 0.5 * h * pb.grad_U(Q1)[0]
    G1 = algebra.G(Q1)
    try:
        mu = algebra.velocity(G1, algebra.minv_G(G1), algebra.minv(p_star)) / (0.5 * h)
    except np.linalg.LinAlgError as exc:  # the compiled loop's SINGULAR after the Newton iterations
        raise ConvergenceError(n, t, float("nan"), it, f"singular Newton matrix ({exc})") from None
    p1 = p_star - 0.5 * h * algebra.times(G1, mu)
    return q1 - q0, p1 - p0, lam, it


class RattleStepper:
    """One RATTLE step at a time; warm-starts Newton from the previous step's lam. Its linear algebra is
    ``DenseRattle``'s, or on the sparse path (``sparse.path``) ``sparse.rattle.SparseRattle``'s;
    ``linear_algebra`` says which."""

    def __init__(self, method: RATTLE, problem: Problem):
        self.method = method
        self.problem = problem
        self.lam = np.zeros(problem.nu)
        sparse = problem.nu and sparse_path(problem)
        self.algebra = SparseRattle(problem) if sparse else DenseRattle(problem)

    @property
    def linear_algebra(self) -> str:
        """How the multiplier systems are solved: "sparse" or "dense"."""
        return self.algebra.name

    def step(self, q0: np.ndarray, p0: np.ndarray, h: float, n: int = 0, t: float = 0.0):
        """Advance (q0, p0) by h; returns (dq, dp, lam, Newton iterations)."""
        pb = self.problem
        if pb.nu == 0:  # Stormer-Verlet
            ph = p0 - 0.5 * h * pb.grad_U(q0[None, :])[0]
            q1 = q0 + h * pb.minv(ph)
            p1 = ph - 0.5 * h * pb.grad_U(q1[None, :])[0]
            return q1 - q0, p1 - p0, np.zeros(0), 1
        dq, dp, self.lam, it = rattle_step(pb, self.method.rule, self.algebra, q0, p0, h, self.lam.copy(), n, t)
        return dq, dp, self.lam, it
