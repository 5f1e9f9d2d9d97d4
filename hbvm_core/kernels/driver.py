"""The Python side of the compiled time loops: buffers, chunked emission to the sink, errors.

``CompiledRunner`` drives the constant-multiplier loop (template ``hbvm.py``),
``PolynomialRunner`` the polynomial-multiplier one (``polynomial.py``),
``RattleRunner`` the RATTLE one (``rattle.py``); each is named by its method's
loop description (``method.LOOP``, ``kernels/description.py``), which gives it
the template, the failure reasons and the fields of ``state`` and ``info``; all
modules come from ``registry.loop_module``. Same contract as
``hbvm_core.integrate.python_runner``: points every ``save_every`` steps (and
the last), per-step (t, lam, iterations) every ``save_every`` steps, emitted to
the sink in blocks of ``chunk`` rows; the compiled ``run_chunk`` fills
preallocated buffers and returns whenever one is full, so memory does not grow
with the number of steps.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import numpy as np

from ..blended import initial_multiplier
from ..errors import ConvergenceError, ProblemError
from ..legendre import shifted_legendre, tableau
from .description import LoopDescription
from .registry import loop_module, note_compiled
from .rules import DIVERGED, NON_FINITE_STATE, SINGULAR, buffer_rows, name_failed_step

if TYPE_CHECKING:  # a type only: problem.py is a layer above kernels (it builds the reference's module)
    from ..problem import Problem

SOLVER_CODES = {"fixed-point": 0, "blended": 1}
WARM_CODES = {"extrapolate": 0, "previous": 1, "p0": 2}


def specialise_ks() -> bool:
    """HBVM_SPECIALISE_KS=1: compile a loop per HBVM(k, s), with k and s fixed, at one compile per
    (problem, k, s, solver) instead of per (problem, solver).

    Measured (CPU time per step, HBVM(2,2) conical pendulum and HBVM(6,2) tethered satellites, two
    alternating runs on a busy 2-core machine): fixed point 1.0-1.5x and 1.15-1.25x faster, blended
    1.2-1.7x and 1.1-1.5x; benchmarks/README.md's earlier table: 1.5x (conical) and 1.0x (tethered),
    fixed point. So it pays for long runs of one method, not for studies of many (k, s)."""
    return os.environ.get("HBVM_SPECIALISE_KS", "") not in ("", "0")


@functools.cache
def constant_tables(k: int, s: int) -> tuple[np.ndarray, ...]:
    """Ihat, W, X, E of HBVM(k, s) as the loop takes them, built once per (k, s) (never written by a loop)."""
    tab = tableau(k, s)
    return tuple(np.array(a, dtype=float, order="C") for a in (tab.Ihat, tab.W, tab.X, tab.E))


@functools.cache
def polynomial_tables(k: int, s: int) -> tuple[np.ndarray, ...]:
    """Ihat, W, X, Bf, E, P0 of the polynomial-multiplier loop, built once per (k, s) (never written by a loop).

    Bf[(i, n), l] = b_l P_i(c_l) P_n(c_l) (docs/method.md 6), P0 = P_i(0)."""
    tab = tableau(k, s)
    Bf = np.einsum("lj,li->jil", tab.W, tab.Phat).reshape(s * s, k)
    P0 = shifted_legendre(s - 1, np.zeros(1))[0]
    # writable C-ordered copies: numba types read-only arrays differently (a second compile)
    return tuple(np.array(a, dtype=float, order="C") for a in (tab.Ihat, tab.W, tab.X, Bf, tab.E, P0))


def cholesky_factor(problem: Problem) -> np.ndarray:
    """Lower Cholesky factor of M, or an empty (0, 0) array for M = I."""
    if problem.M is None:
        return np.zeros((0, 0))
    return np.ascontiguousarray(np.linalg.cholesky(problem.M))


class LoopRunner:
    """Drives a generated module's ``run_chunk`` for one (method, problem); call it like ``python_runner``.

    ``description`` is the method's loop (``method.LOOP``); a subclass builds ``module`` (``load``) and gives
    the loop's leading arguments (``loop_arguments``) and its ``_fail``.
    """

    module = None
    description: LoopDescription

    def load(self, method, problem: Problem, **constants) -> None:
        """What every loop takes from (method, problem): M's Cholesky factor ``L``, the callbacks' ``params``, the
        stopping rule, the method's loop description and its generated module for the problem's callbacks (the
        compile-time constants m, nu, whether M != I, and ``constants``), whose callbacks must agree with numpy's."""
        self.L = cholesky_factor(problem)
        self.params = np.array(problem.kernels.params, dtype=float).reshape(-1)
        rule = method.rule
        self.rule = np.array([rule.rtol, rule.stall_rtol, rule.max_iter], dtype=float)
        self.description = method.LOOP
        sizes = {"M_SIZE": problem.m, "NU_SIZE": problem.nu, "HAS_M": self.L.size > 0}
        self.module = loop_module(self.description, problem.kernels, sizes | constants)
        self.fields = self.description.fields()
        check_callbacks(problem, self.module, self.params)

    def guess_rows(self, method) -> int:
        """Rows of the per-step guess carried between steps (gamma: one per coefficient)."""
        return method.tableau.s

    def loop_arguments(self, problem, q, p, cq, cp, gamma_prev, state, h, N, save_every) -> tuple:
        raise NotImplementedError

    def tail_arguments(self, problem: Problem) -> tuple:
        """The loop's arguments after ``info``, fresh for each call (none for the HBVM loops); ``_fail`` gets them."""
        return ()

    def __call__(self, problem, method, h, N, compensated, save_every, chunk, sink) -> dict:
        m, nu, s = problem.m, problem.nu, self.guess_rows(method)
        q, p = problem.q0.copy(), problem.p0.copy()
        cq, cp = np.zeros(m), np.zeros(m)
        gamma_prev = np.zeros((s, m))
        F = self.fields
        state = np.zeros(F["STATE_SIZE"], dtype=np.int64)
        state[F["STATE_POINTS"]] = 1  # the initial point, row 0 of the point buffer
        state[F["STATE_COMPENSATED"]] = int(bool(compensated))
        info = np.zeros(F["INFO_SIZE"])
        rows = (F["STATE_POINTS"], F["STATE_STEPS"])  # the rows in the point and step buffers
        chunk = buffer_rows(chunk, N, save_every)
        pts = (np.empty(chunk), np.empty((chunk, m)), np.empty((chunk, m)))
        stp = (np.empty(chunk), np.empty((chunk, nu)), np.empty(chunk, dtype=np.int32))
        pts[0][0], pts[1][0], pts[2][0] = 0.0, q, p
        starts = [0, 0]

        def emit(which: int) -> None:
            n = int(state[rows[which]])
            if n:
                bufs, out = (pts, sink.points) if which == 0 else (stp, sink.steps)
                out(starts[which], *(a[:n] for a in bufs))
                starts[which] += n
                state[rows[which]] = 0

        if state[rows[0]] == chunk:
            emit(0)
        args = self.loop_arguments(problem, q, p, cq, cp, gamma_prev, state, float(h), int(N), int(save_every))
        run = self.module.run_chunk
        tail = self.tail_arguments(problem)
        first = True
        while True:
            status = run(*args, *pts, *stp, info, *tail)
            if first:
                note_compiled(self.module)
                first = False
            if status != 0:  # the loop's q: the failed step's start, or its end for a non-finite state
                n_failed = int(info[F["INFO_STEP"]])
                if status == NON_FINITE_STATE:
                    name_failed_step(problem, n_failed, h, np.full(m, np.nan), q)
                else:
                    name_failed_step(problem, n_failed, h, q)
                self._fail(problem, q, h, gamma_prev, info, *tail)
            full = False
            for which in (0, 1):
                if state[rows[which]] == chunk:
                    emit(which)
                    full = True
            if state[F["STATE_N"]] >= N:
                break
            if not full:
                raise RuntimeError("compiled loop returned early without a full buffer")  # a bug, never expected
        emit(0)
        emit(1)
        used = {
            "iterations": int(state[F["STATE_ITERATIONS"]]),
            "max_iterations": int(state[F["STATE_MAX_ITERATIONS"]]),
        }
        return used | {"backend": "numba"}

    def _fail(self, problem: Problem, q0: np.ndarray, h: float, guess: np.ndarray, info: np.ndarray) -> None:
        raise NotImplementedError

    def _error(self, info: np.ndarray, h: float) -> ConvergenceError:
        """The ConvergenceError of a failed run_chunk (info: status, step, iterations, increment), worded by the
        loop's description (``reasons``)."""
        F = self.fields
        status, n = int(info[F["INFO_STATUS"]]), int(info[F["INFO_STEP"]])
        it, d = int(info[F["INFO_ITERATIONS"]]), float(info[F["INFO_INCREMENT"]])
        if status == SINGULAR:
            it, d = 0, float("nan")
        return ConvergenceError(n, n * h, d, it, self.description.reasons[status])

    @staticmethod
    def _name_non_finite(problem: Problem, Q: np.ndarray, n: int, h: float) -> None:
        """NonFiniteError naming the callback that returns NaN/inf at the points Q, as the numpy stepper does."""
        problem.check_finite(Q, n, n * h)


def check_callbacks(problem: Problem, module, params: np.ndarray) -> None:
    """ProblemError when a compiled callback bound in ``module`` disagrees with the numpy one near q0."""
    Q = np.stack([problem.q0, problem.q0 + 1e-3])
    pairs = [("grad_U", problem.grad_U, module.grad_U_original, (2, problem.m))]
    if problem.nu:
        pairs.append(("G", problem.G, module.G_original, (2, problem.m, problem.nu)))
        if hasattr(module, "g_original"):
            pairs.append(("g", problem.g, module.g_original, (2, problem.nu)))
    for key, f, kernel, shape in pairs:
        ref = np.asarray(f(Q), dtype=float)
        out = np.zeros(shape)
        kernel(Q, out, params)
        err = float(np.max(np.abs(out - ref))) if ref.shape == shape else np.inf
        if not err <= 1e-12 * (1.0 + float(np.max(np.abs(ref)))):
            raise ProblemError(
                f"{problem.name}: kernels.{key} disagrees with the numpy {key} near q0 (max difference {err:.3e})"
            )


class CompiledRunner(LoopRunner):
    """The compiled HBVM(k, s) loop (constant multiplier) for one (method, problem)."""

    def __init__(self, method, problem: Problem):
        self.solver = SOLVER_CODES[method.solver]
        tab = method.tableau
        ks = {"K_SIZE": tab.k, "S_SIZE": tab.s} if specialise_ks() else {}
        self.load(method, problem, SOLVER=self.solver, **ks)
        self.tab = constant_tables(tab.k, tab.s)
        self.warm = WARM_CODES[method.warm_start]

    def loop_arguments(self, problem, q, p, cq, cp, gamma_prev, state, h, N, save_every) -> tuple:
        lam_prev = initial_multiplier(problem) if self.solver == 1 else np.zeros(problem.nu)
        return (q, p, cq, cp, gamma_prev, lam_prev, state, h, N, save_every, self.warm, self.rule, *self.tab,
                self.L, self.params)  # fmt: skip

    def _fail(self, problem: Problem, q0: np.ndarray, h: float, guess: np.ndarray, info: np.ndarray) -> None:
        """Raise what the numpy stepper raises for the same failure (ConvergenceError, or NonFiniteError)."""
        status, n = int(info[self.fields["INFO_STATUS"]]), int(info[self.fields["INFO_STEP"]])
        if status != NON_FINITE_STATE:
            self._name_non_finite(problem, q0 + h * (self.tab[0] @ guess), n, h)
        raise self._error(info, h)


class PolynomialRunner(LoopRunner):
    """The compiled loop of a PolynomialHBVM (nu >= 1, any M) for one problem."""

    def __init__(self, method, problem: Problem):
        self.load(method, problem)
        self.arrays = polynomial_tables(method.tableau.k, method.tableau.s)
        self.warm = WARM_CODES[method.warm_start]
        self.projection = bool(method.projection)

    def loop_arguments(self, problem, q, p, cq, cp, gamma_prev, state, h, N, save_every) -> tuple:
        return (q, p, cq, cp, gamma_prev, state, h, N, save_every, self.warm, self.rule, self.projection,
                *self.arrays, self.L, self.params)  # fmt: skip

    def _fail(self, problem: Problem, q0: np.ndarray, h: float, guess: np.ndarray, info: np.ndarray) -> None:
        """Raise what the numpy stepper raises for the same failure (ConvergenceError, or NonFiniteError)."""
        status, n = int(info[self.fields["INFO_STATUS"]]), int(info[self.fields["INFO_STEP"]])
        if status != NON_FINITE_STATE:
            self._name_non_finite(problem, q0[None, :], n, h)
        raise self._error(info, h)


class RattleRunner(LoopRunner):
    """The compiled RATTLE loop (template ``rattle.py``) for one problem with compiled grad_U, G and g."""

    def __init__(self, method, problem: Problem):
        self.load(method, problem)

    def guess_rows(self, method) -> int:
        return 1  # RATTLE carries lam (its own argument), not a gamma

    def loop_arguments(self, problem, q, p, cq, cp, gamma_prev, state, h, N, save_every) -> tuple:
        lam = np.zeros(problem.nu)  # RattleStepper's first Newton start
        return (q, p, cq, cp, lam, state, h, N, save_every, self.rule, self.L, self.params)

    def tail_arguments(self, problem: Problem) -> tuple:
        return (np.zeros(problem.m),)  # q_fail: the last Newton iterate q1 of a failed step

    def _fail(self, problem: Problem, q0: np.ndarray, h: float, guess: np.ndarray, info: np.ndarray, q_fail) -> None:
        """Raise what ``RattleStepper.step`` raises for the same failure (ConvergenceError, or NonFiniteError)."""
        status, n = int(info[self.fields["INFO_STATUS"]]), int(info[self.fields["INFO_STEP"]])
        if status == DIVERGED:
            self._name_non_finite(problem, q_fail[None, :], n, h)
        raise self._error(info, h)
