"""One run of a problem without a compiled loop, summarised as an ensemble run is (``ensemble.EnsembleResult``).

``integrate_summary`` integrates a run by the numpy time loop (``integrate.python_runner``: the problem's sparse
path where it has one, ``hbvm_core.sparse``), keeping the points an ensemble run keeps (n = 0, sample_every,
2 sample_every, ..., and N: ``kernels.rules.point_saved``) and the multiplier of the last step, and returns them
with H_error = max |H - H0| and g_error = max |g_i| over those points (docs/method.md 1) and the run's wall time.
A run whose step fails is a status (``kernels/rules.py``'s codes), not an exception, as in an ensemble. It is the
road of runs that share no compiled loop: problems of different sizes (a chain over its number of links), or
problems whose callbacks have no compiled form.
"""

from __future__ import annotations

import time

import numpy as np

from .ensemble import EnsembleResult
from .errors import ConvergenceError, NonFiniteError
from .integrate import python_runner
from .kernels.rules import DIVERGED, NO_CONVERGENCE, NON_FINITE_STATE, OK, SINGULAR
from .problem import Problem


class _SummarySink:
    """Keeps the saved points and the multiplier and iteration count of the last step received."""

    def __init__(self, nu: int) -> None:
        self.t: list[np.ndarray] = []
        self.q: list[np.ndarray] = []
        self.p: list[np.ndarray] = []
        self.lam = np.full(nu, np.nan)
        self.steps_seen = 0

    def points(self, start, t, q, p) -> None:
        self.t.append(t.copy())
        self.q.append(q.copy())
        self.p.append(p.copy())

    def steps(self, start, t, lam, iterations) -> None:
        if len(t):
            self.lam = np.array(lam[-1], dtype=float)
        self.steps_seen = start + len(t)


def _status(exc: Exception) -> int:
    """The ensemble's status code of a failed step (the reason a numpy stepper gives)."""
    if isinstance(exc, NonFiniteError):
        return NON_FINITE_STATE
    reason = getattr(exc, "reason", "")
    if "non-finite" in reason:
        return NON_FINITE_STATE
    if "diverg" in reason:
        return DIVERGED
    if "singular" in reason:
        return SINGULAR
    return NO_CONVERGENCE


class _Steps:
    """A method's stepper counting its steps and iterations (what a failed run reports)."""

    def __init__(self, stepper) -> None:
        self.stepper, self.n, self.iterations, self.worst = stepper, 0, 0, 0
        self.linear_algebra = getattr(stepper, "linear_algebra", "dense")

    def step(self, q, p, h, n, t):
        self.n = n
        dq, dp, lam, it = self.stepper.step(q, p, h, n, t)
        self.iterations, self.worst = self.iterations + it, max(self.worst, it)
        self.lam = lam
        return dq, dp, lam, it


def integrate_summary(
    problem: Problem, method, h: float, N: int, sample_every: int, compensated: bool = True
) -> tuple[EnsembleResult, float]:
    """(one run's EnsembleResult, its wall seconds): N steps of h by the numpy loop, the points of an ensemble run
    (every ``sample_every``-th and the last) kept; backend "numpy"."""
    m, nu = problem.m, problem.nu
    sink = _SummarySink(nu)
    stepper = _Steps(method.stepper(problem))
    status, fail_step, done = OK, -1, N
    t0 = time.perf_counter()
    try:
        python_runner(problem, method, float(h), int(N), compensated, int(sample_every), 1, sink, stepper=stepper)
    except (ConvergenceError, NonFiniteError) as exc:
        status, fail_step, done = _status(exc), int(getattr(exc, "step", stepper.n)), stepper.n
    wall = time.perf_counter() - t0
    t = np.concatenate(sink.t) if sink.t else np.zeros(0)
    q = np.concatenate(sink.q) if sink.q else np.zeros((0, m))
    p = np.concatenate(sink.p) if sink.p else np.zeros((0, m))
    lam = getattr(stepper, "lam", sink.lam) if status == OK else np.full(nu, np.nan)
    with np.errstate(all="ignore"):
        H = problem.hamiltonian(q, p) if len(q) else np.zeros(0)
        H_error = float(np.max(np.abs(H - H[0]))) if len(H) else np.nan
        g_error = np.max(np.abs(problem.constraint(q)), axis=0) if nu and len(q) else np.full(nu, np.nan)
    one = lambda x, dtype=np.int64: np.array([x], dtype=dtype)  # noqa: E731
    kind = getattr(stepper.stepper, "sparse_sweep", "none")
    sweep = "" if kind == "none" else f", {kind} sweep"
    res = EnsembleResult(
        status=one(status), fail_step=one(fail_step), steps=one(done), iterations=one(stepper.iterations),
        max_iterations=one(stepper.worst), n_saved=one(len(t)), t=t[None], q=q[None], p=p[None],
        lam=np.asarray(lam, dtype=float).reshape(1, nu), H_error=one(H_error, float), g_error=g_error.reshape(1, nu),
        backend="numpy", backend_note=f"per-run numpy loop ({stepper.linear_algebra} linear algebra{sweep})",
    )  # fmt: skip
    return res, wall
