"""Reference solutions: closed forms, the index-reduced ODE at tight tolerance, and HBVM(12,6) on theta.

- ``exact``: the problem's closed form (planar and conical pendulum).
- ``ode``: the index-reduced ODE (docs/method.md section 1: p' = -grad U - G lambda(q, p))
  integrated by DOP853 at rtol = atol = 1e-13 (docs/method.md section 4, references for 3 and 4).
- ``hbvm``: the published planar reference, HBVM(12,6) on the unconstrained theta pendulum.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ConfigError, SolverError
from .problem import Problem

REFERENCE_KINDS = ("auto", "exact", "ode", "hbvm")

#: Largest step of the HBVM(12,6) theta reference (order 12: error far below 1e-15).
HBVM_REFERENCE_HMAX = 0.025


def resolved_kind(problem: Problem, reference_kind: str = "auto") -> str:
    """The reference ``reference_solution`` computes for ``reference_kind``: ``auto`` is the closed form where the
    problem has one, else the ODE; the other kinds as given."""
    if reference_kind not in REFERENCE_KINDS:
        raise ConfigError(f"reference_kind = {reference_kind!r}: expected one of {', '.join(REFERENCE_KINDS)}")
    if reference_kind == "auto":
        return "exact" if problem.exact is not None else "ode"
    return reference_kind


def reference_solution(problem: Problem, times, reference_kind: str = "auto", rtol: float = 1e-13):
    """(q, p, lam) of the reference at ``times``: the closed form where there is one, else the ODE."""
    times = np.asarray(times, dtype=float)
    reference_kind = resolved_kind(problem, reference_kind)
    if reference_kind == "exact":
        if problem.exact is None:
            raise ConfigError(f"reference: exact: problem {problem.name!r} has no closed-form solution")
        return problem.exact(times)
    if reference_kind == "hbvm":
        if problem.name != "planar_pendulum" or problem.params:
            what = f"{problem.name!r} {problem.params}" if problem.params else repr(problem.name)
            raise ConfigError(f"reference_kind = 'hbvm' exists for the published planar_pendulum only, not {what}")
        return planar_hbvm_reference(times)
    return _memo(problem, times, rtol)


#: the last few ODE references (aggregating a study asks for the same one once per row)
_CACHE: dict = {}
_CACHE_SIZE = 8


def _identity(problem: Problem) -> tuple:
    """What defines the ODE: name, params, initial data, M, the callbacks' code (not the objects) and the
    problem's ``identity`` (a problem of expressions: its canonical expressions; the code is generated)."""
    code = tuple(getattr(getattr(problem, f), "__code__", getattr(problem, f)) for f in ("grad_U", "G", "d2g"))
    M = None if problem.M is None else problem.M.tobytes()
    ident = getattr(problem, "identity", None)
    state = (problem.q0.tobytes(), problem.p0.tobytes(), M)
    return (problem.name, repr(sorted(problem.params.items())), *state, code, ident)


def _memo(problem: Problem, times: np.ndarray, rtol: float):
    """The reference at ``times`` from the dense solution of the ODE on [0, max(times)], solved once per
    (problem, interval, rtol): the rows of a study sample the same solution at their own times."""
    t_max = float(times.max()) if times.size else 0.0
    key = (_identity(problem), t_max, float(rtol))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = dense_solution(problem, t_max, rtol=rtol)
    return _evaluate(problem, _CACHE[key], times)


def dense_solution(problem: Problem, t_max: float, rtol: float = 1e-13, atol: float | None = None):
    """The dense output of the index-reduced ODE on [0, t_max] by DOP853 at ``rtol`` (None for t_max <= 0)."""
    if problem.nu and problem.d2g is None:
        raise ConfigError(f"reference: problem {problem.name!r} needs d2g for the index-reduced reference ODE")
    if t_max <= 0:
        return None
    from scipy.integrate import solve_ivp  # here: scipy.integrate costs a second to import

    y0 = np.concatenate([problem.q0, problem.p0])
    sol = solve_ivp(
        problem.index_reduced_rhs,
        (0.0, t_max),
        y0,
        method="DOP853",
        rtol=rtol,
        atol=rtol if atol is None else atol,
        dense_output=True,
    )
    if not sol.success:
        raise SolverError(f"reference ODE for {problem.name!r} failed: {sol.message}")
    return sol.sol


def _evaluate(problem: Problem, dense, times: np.ndarray):
    """(q, p, lam) of a dense solution at ``times`` (y0 itself at t = 0)."""
    y0 = np.concatenate([problem.q0, problem.p0])
    if dense is None:
        Y = np.repeat(y0[None], times.size, axis=0)
    else:
        Y = dense(times).T
        Y[times == 0.0] = y0
    q, p = Y[:, : problem.m], Y[:, problem.m :]
    return q, p, problem.multiplier(q, p)


#: the tighter DOP853 tolerance whose solution the ODE reference (rtol 1e-13) is compared with to estimate the
#: reference's own error (scipy's tightest is 100 eps = 2.2e-14)
TIGHT_RTOL = 2.5e-14
#: the number of equally spaced times of [0, t_end] at which ``metrics.reference_accuracy`` compares the solutions
ACCURACY_POINTS = 201


def index_reduced_solution(problem: Problem, times, rtol: float = 1e-13, atol: float | None = None):
    """The index-reduced ODE by DOP853 at ``rtol`` (dense output), evaluated at ``times``."""
    times = np.asarray(times, dtype=float)
    t_max = float(times.max()) if times.size else 0.0
    return _evaluate(problem, dense_solution(problem, t_max, rtol=rtol, atol=atol), times)


def planar_hbvm_reference(times) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HBVM(12,6) on the theta pendulum, mapped to Cartesian (q, p) and lambda = (theta'^2 + cos theta)/2.

    The times must lie on a common grid t = j * dt; the step is dt / r with r the
    smallest integer giving a step <= HBVM_REFERENCE_HMAX.
    """
    from .integrate import integrate
    from .methods import HBVM
    from .problems.pendulum import theta_pendulum, theta_to_planar

    times = np.asarray(times, dtype=float)
    t_max = float(times.max())
    pos = np.unique(times[times > 0])
    dt = float(np.min(np.diff(np.concatenate([[0.0], pos])))) if pos.size else t_max
    j = times / dt
    if np.any(np.abs(j - np.round(j)) > 1e-7):
        raise ConfigError("reference_kind 'hbvm' needs the sample times on a common grid")
    r = math.ceil(dt / HBVM_REFERENCE_HMAX - 1e-9)
    h = dt / r
    t_end = round(t_max / h) * h
    traj = integrate(theta_pendulum(), HBVM(12, 6), h, t_end)
    idx = np.round(times / h).astype(int)
    th, om = traj.q[idx, 0], traj.p[idx, 0]
    q, p = theta_to_planar(th, om)
    return q, p, (0.5 * (om**2 + np.cos(th)))[:, None]
