"""The stabilized index-2 DAE (Gear-Gupta-Leimkuhler) by SUNDIALS IDA (scikit-sundae).

A baseline, not an HBVM: the standard DAE solver a user would reach for (the shell it shares with DOP853:
``continuous``). With
y = (q, p, lambda, mu) IDA solves F(t, y, y') = 0 for

    q' = M^{-1} p - G(q) mu,    p' = -grad U(q) - G(q) lambda,
    g(q) = 0,                   G(q)^T M^{-1} p = 0,

whose solution has mu = 0 and lambda = lambda(q, p) (docs/method.md 1). As for
DOP853, the step h of the time loop is the *output* spacing: one continuous IDA
integration (variable order BDF, its own steps for rtol, atol) is sampled at
t_n = n h by IDA's interpolation; it restarts only when the time loop hands it
a state other than the one it returned.

Initial values are consistent: lambda_0 = lambda(q_0, p_0), mu_0 = 0 and y'_0
from the equations. lambda and mu are algebraic (IDA's ``algebraic_idx``) and
excluded from the error test; scikit-sundae exposes no IDASetSuppressAlg, so
they get an absolute tolerance of 1e30, which drops them from IDA's weighted
error norm just the same.

iterations = residual evaluations spent in the output step;
lam = lambda(q_n, p_n), the exact multiplier at the step's starting point.

The residual is vectorised numpy over the problem's callbacks; IDA spends
most of its time in it (about 12 us a call on the planar pendulum, 40 us on
the tethered satellites, 50-75 % of a run). Where the problem has compiled
callbacks for grad_U, G and g (``Kernels``; every built-in problem),
``compiled_runner`` gives the same time loop with a residual that calls them
instead (8-11 us a call on the built-in problems), checked against the numpy
ones near q0 first; the numpy residual stays for ``backend="numpy"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, ConvergenceError
from ..problem import Problem
from .continuous import ContinuousMethod, OutputGridStepper

#: The absolute tolerance that takes the multipliers out of IDA's error test.
_FREE = 1e30


def _ida_class():
    try:
        from sksundae.ida import IDA
    except ImportError:
        raise ConfigError("method = ida needs the package scikit-sundae (pip install scikit-sundae)") from None
    return IDA


@dataclass(frozen=True)
class IDA(ContinuousMethod):
    """SUNDIALS IDA on the stabilized index-2 DAE at tolerance rtol (atol defaults to rtol)."""

    rtol: float = 1e-8
    atol: float | None = None

    method_name: ClassVar[str] = "ida"
    SOLVER: ClassVar[str] = "IDA"
    numerics_sources: ClassVar[tuple[str, ...]] = ("methods/ida.py", "methods/continuous.py", "integrate.py")
    #: the residual over the compiled callbacks (``compiled_runner``); its cost is the numpy path's
    COMPILED_NEEDS: ClassVar[frozenset[str] | None] = frozenset({"G", "g"})
    EXAMPLES: ClassVar[tuple[dict, ...]] = ({"method": "ida", "rtol": 1e-8, "atol": 1e-8},)
    SUMMARY: ClassVar[str] = (
        "the stabilized index-2 (Gear-Gupta-Leimkuhler) DAE q' = M^-1 p - G mu, p' = -grad U - G lambda, g = 0, "
        "G^T M^-1 p = 0 by SUNDIALS IDA (scikit-sundae) at that tolerance (atol defaults to rtol): the standard "
        "DAE solver; consistent start (lambda = lambda(q0, p0), mu = 0), lambda and mu algebraic and out of the "
        "error test; the study's h is the output step; g holds to about rtol, not round-off"
    )

    def make_stepper(self, problem: Problem, callbacks: CompiledCallbacks | None = None) -> IDAStepper:
        return IDAStepper(self, problem, callbacks)

    def compiled_runner(self, problem: Problem):
        """The time loop with a residual over the problem's compiled grad_U, G and g, or None without them."""
        if not self.has_compiled(problem):
            return None
        return IDARunner(self, problem)


class CompiledCallbacks:
    """grad_U, G and g of a problem's ``Kernels`` as numba functions with their output arrays, for one point.

    Checked against the numpy callbacks near q0 (``kernels.driver.check_callbacks``): a mismatch is an error."""

    def __init__(self, problem: Problem):
        from types import SimpleNamespace

        from ..kernels.driver import check_callbacks
        from ..kernels.registry import NO_CONSTRAINTS, resolve_callback

        kernels, m, nu = problem.kernels, problem.m, problem.nu
        self.params = np.array(kernels.params, dtype=float).reshape(-1)
        found = {}
        for key in ("grad_U", "G", "g"):
            f = getattr(kernels, key)
            found[key] = resolve_callback(key, NO_CONSTRAINTS[key] if f is None else f)[0]
        self.grad_U, self.G, self.g = found["grad_U"], found["G"], found["g"]
        check_callbacks(problem, SimpleNamespace(**{f"{k}_original": f for k, f in found.items()}), self.params)
        self.Q, self.gU, self.GQ, self.gQ = np.zeros((1, m)), np.zeros((1, m)), np.zeros((1, m, nu)), np.zeros((1, nu))


class IDARunner:
    """``integrate.python_runner`` over an IDAStepper whose residual calls the compiled callbacks."""

    module = None  # no generated loop module: nothing for the kernel cache

    def __init__(self, method: IDA, problem: Problem):
        self.callbacks = CompiledCallbacks(problem)

    def __call__(self, problem, method, h, N, compensated, save_every, chunk, sink) -> dict:
        from ..integrate import python_runner

        stepper = method.stepper(problem, self.callbacks)
        stats = python_runner(problem, method, h, N, compensated, save_every, chunk, sink, stepper=stepper)
        return stats | {"backend": "numba"}


class IDAStepper(OutputGridStepper):
    """Advances the stabilized index-2 DAE by one output interval per call."""

    def __init__(self, method: IDA, problem: Problem, callbacks: CompiledCallbacks | None = None):
        super().__init__(method, problem)
        self.callbacks = callbacks
        self.nfev = 0  # residual evaluations of the current integration so far
        self._ida = _ida_class()

    # --- the DAE ------------------------------------------------------------------------
    def residual_compiled(self, t: float, y: np.ndarray, yp: np.ndarray, res: np.ndarray) -> None:
        """``residual`` with grad_U, G and g from the compiled callbacks (three numba calls, no Python loops)."""
        cb, pb = self.callbacks, self.problem
        m, nu = pb.m, pb.nu
        q, p, lam, mu = y[:m], y[m : 2 * m], y[2 * m : 2 * m + nu], y[2 * m + nu :]
        cb.Q[0] = q
        v = pb.minv(p)
        cb.grad_U(cb.Q, cb.gU, cb.params)
        res[m : 2 * m] = yp[m : 2 * m] + cb.gU[0]
        if nu:
            cb.G(cb.Q, cb.GQ, cb.params)
            cb.g(cb.Q, cb.gQ, cb.params)
            G = cb.GQ[0]
            res[:m] = yp[:m] - v + G @ mu
            res[m : 2 * m] += G @ lam
            res[2 * m : 2 * m + nu] = cb.gQ[0]
            res[2 * m + nu :] = G.T @ v
        else:
            res[:m] = yp[:m] - v

    def residual(self, t: float, y: np.ndarray, yp: np.ndarray, res: np.ndarray) -> None:
        """F(t, y, y') of the stabilized index-2 form, written into res (all numpy, no loops)."""
        pb = self.problem
        m, nu = pb.m, pb.nu
        q, p, lam, mu = y[:m], y[m : 2 * m], y[2 * m : 2 * m + nu], y[2 * m + nu :]
        Q = q[None, :]
        v = pb.minv(p)
        res[m : 2 * m] = yp[m : 2 * m] + pb.grad_U(Q)[0]
        if nu:
            G = pb.G(Q)[0]
            res[:m] = yp[:m] - v + G @ mu
            res[m : 2 * m] += G @ lam
            res[2 * m : 2 * m + nu] = pb.g(Q)[0]
            res[2 * m + nu :] = G.T @ v
        else:
            res[:m] = yp[:m] - v

    def consistent(self, q: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(y, y') at (q, p): lambda = lambda(q, p), mu = 0, y' from the differential equations."""
        pb = self.problem
        Q, P = q[None, :], p[None, :]
        lam = pb.multiplier(Q, P)[0] if pb.nu else np.zeros(0)
        f = -pb.grad_U(Q)[0]
        if pb.nu:
            f = f - pb.G(Q)[0] @ lam
        nu = pb.nu
        y = np.concatenate([q, p, lam, np.zeros(nu)])
        yp = np.concatenate([pb.minv(p), f, np.zeros(2 * nu)])
        return y, yp

    def _start(self, t: float, q: np.ndarray, p: np.ndarray, n: int) -> None:
        pb = self.problem
        m, nu = pb.m, pb.nu
        rtol, atol = self.method.tolerances
        atols = np.concatenate([np.full(2 * m, atol), np.full(2 * nu, _FREE)])
        self.solver = self._ida(
            self.residual if self.callbacks is None else self.residual_compiled,
            rtol=rtol,
            atol=atols,
            algebraic_idx=list(range(2 * m, 2 * m + 2 * nu)),
            max_num_steps=100_000,
        )
        y, yp = self.consistent(q, p)
        res = self.solver.init_step(t, y, yp)
        if not res.success:
            raise ConvergenceError(n, t, float("nan"), 0, f"IDA failed to start ({res.message})")
        self.nfev = int(res.nfev)

    def step(self, q0: np.ndarray, p0: np.ndarray, h: float, n: int = 0, t: float = 0.0):
        """Advance by the output step h; returns (dq, dp, lambda(q0, p0), residual evaluations)."""
        m = self.problem.m
        self.check_forward(h)
        y0 = np.concatenate([q0, p0])
        if self.must_restart(y0, n):
            self._start(t, q0, p0, n)
        nfev0 = self.nfev
        res = self.solver.step(t + h)
        y1 = np.asarray(res.y).reshape(-1)
        if not res.success or not np.all(np.isfinite(y1)):
            self.problem.check_finite(y1[None, :m], n, t)  # a callback not finite where IDA stopped
            raise ConvergenceError(n, t, float("nan"), int(res.nfev) - nfev0, f"IDA failed ({res.message})")
        self.nfev = int(res.nfev)
        return self.finish(q0, p0, y1[:m].copy(), y1[m : 2 * m].copy(), self.nfev - nfev0)
