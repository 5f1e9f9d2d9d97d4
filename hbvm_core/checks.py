"""Checks of hand-written callbacks, run when a problem is built (docs/python.md, "Checks of the callbacks").

- ``check_vectorised``: every callback takes Q of shape (n, m) (n points) and returns (n, ...): it is
  called on one point and on three, and a callback that raises or returns another leading axis is named.
- ``check_derivatives``: the derivatives the user wrote agree with central differences of the functions
  they differentiate (docs/method.md 1), at q0 and at the probe points of ``probes.probe_points``:

      grad_U  against  (U(q + h e_j) - U(q - h e_j)) / 2h
      G       against  (g(q + h e_j) - g(q - h e_j)) / 2h            (column i: gradient of g_i)
      d2g     against  v^T (G(q + h v) - G(q - h v)) / 2h            (v^T Hessian(g_i) v)

  and the compiled callbacks of ``Problem.kernels`` (their Python functions, so nothing is compiled here)
  against the numpy ones at the same points. Each function is called once on all the shifted points
  (the callbacks are vectorised), so the check costs a few callback calls whatever m is.

A mismatch is a ``ProblemError`` of one line naming the callback, the point and the relative
discrepancy. ``Problem(check_derivatives=False)`` (study key ``check_derivatives: false``) skips
``check_derivatives``.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib

import numpy as np

from .errors import ProblemError
from .probes import probe_points

#: what every callback must do (quoted by the errors below)
VECTORISED = "callbacks receive Q of shape (n, m) (n points) and must return (n, ...)"
EPS = float(np.finfo(float).eps)
#: Central-difference step, relative to the size of the coordinates: the error of (f(q+h) - f(q-h)) / 2h is
#: h^2 |f'''| / 6 (truncation) plus eps |f| / h (rounding), smallest near h = eps^(1/3) ~ 6e-6, where both
#: are ~ eps^(2/3) ~ 4e-11 relative to the function's own scales.
STEP = EPS ** (1.0 / 3.0)
#: Accepted relative discrepancy of a derivative. Correct callbacks of the shipped problems and of
#: tests/user_problems.py agree to 1e-9 or better (eps^(2/3) times the ratio of their curvature scales); the
#: bugs this is for -- a wrong sign (discrepancy 2), a missing factor 2 (0.5), a transposed or misplaced
#: column of G (order 1) -- exceed it by five orders of magnitude or more.
TOL = 1e-6
#: Accepted relative discrepancy between a compiled callback and its numpy twin: the same formula evaluated
#: in another order agrees to a few eps times the terms' size; any real difference is of order one.
TOL_KERNEL = 1e-9
#: Below FLOOR |f| / (size of q) a derivative of f counts as zero: the rounding of its central difference,
#: eps^(2/3) |f| / (size of q), is then at most eps^(2/3) / FLOOR ~ 4e-8 of the scale, well below TOL.
FLOOR = 1e-3
SWITCH = "check_derivatives=False (study key check_derivatives: false) skips this check"
_ENABLED: contextvars.ContextVar[bool] = contextvars.ContextVar("hbvm_check_derivatives", default=True)


@contextlib.contextmanager
def derivative_checks(enabled: bool):
    """Within the block, problems built run ``check_derivatives`` only if ``enabled`` (and their own switch).

    The workflow builds a study's problems in ``derivative_checks(<the study's check_derivatives>)``, and on
    its workers in ``derivative_checks(False)``: they build the problem that the study checked (same
    fingerprint)."""
    token = _ENABLED.set(bool(enabled))
    try:
        yield
    finally:
        _ENABLED.reset(token)


def enabled() -> bool:
    """False inside ``derivative_checks(False)``."""
    return _ENABLED.get()


# --------------------------------------------------------------------------- vectorisation
def _call_on(problem, key: str, f, n: int) -> np.ndarray:
    """f at n points near q0 (and n velocities for d2g), as an array; ProblemError naming ``key`` if it raises."""
    Q = problem.q0 + 1e-3 * np.arange(n)[:, None]
    args = (Q, np.broadcast_to(problem.p0, Q.shape).copy()) if key == "d2g" else (Q,)
    try:
        with np.errstate(all="ignore"):
            return np.asarray(f(*args))
    except Exception as exc:  # noqa: BLE001 - any exception here is the user's callback's, reported as such
        what = " ".join(str(exc).split())
        raise ProblemError(
            f"{problem.name}: callback {key} raised {type(exc).__name__} for Q of shape {Q.shape} ({what}); "
            f"{VECTORISED}"
        ) from None


def check_vectorised(problem, keys=("U", "grad_U", "g", "G", "d2g")) -> None:
    """Each callback of ``keys`` given returns a leading axis of n for Q of n = 1 and n = 3 points.

    Two sizes: a callback written for one point (``lambda q: q[1] - q[0]**2``) raises for n = 1, or returns an
    axis of length m instead of n, which a single size could mistake for n when n = m."""
    for key in keys:
        f = getattr(problem, key, None)
        if f is None:
            continue
        for n in (1, 3):
            val = _call_on(problem, key, f, n)
            if val.ndim == 0 or val.shape[0] != n:
                raise ProblemError(
                    f"{problem.name}: callback {key} returned shape {val.shape} for Q of shape {(n, problem.m)}; "
                    f"{VECTORISED}"
                )


# --------------------------------------------------------------------------- derivatives
def _where(P: np.ndarray, j: int) -> str:
    point = "q0" if j == 0 else f"probe point {j}"
    return f"{point} (q = [{', '.join(f'{x:.6g}' for x in P[j])}])"


def _compare(problem, key: str, against: str, given: np.ndarray, reference: np.ndarray, floor: np.ndarray, P, tol):
    """ProblemError if max |given - reference| exceeds tol times the scale of the values at that point.

    The scale of point j: the largest of |given|, |reference| and ``floor[j]`` (FLOOR |f| / (size of q) for a
    derivative of f: below it a derivative is rounding noise), so that an exact zero against the rounding of its
    central difference is no discrepancy."""
    n = len(P)
    diff = np.abs(given - reference).reshape(n, -1).max(axis=1)
    scale = np.maximum.reduce(
        [np.abs(given).reshape(n, -1).max(axis=1), np.abs(reference).reshape(n, -1).max(axis=1), floor]
    )
    rel = diff / np.where(scale > 0, scale, 1.0)
    bad = ~(rel <= tol)  # NaN counts as a mismatch
    if bad.any():
        j = int(np.flatnonzero(bad)[0])  # the first point that fails: q0 when it does
        raise ProblemError(
            f"{problem.name}: callback {key} does not match {against} at {_where(P, j)}: "
            f"relative discrepancy {rel[j]:.2e} (tolerance {tol:.0e}); {SWITCH}"
        )


def _directions(m: int, n: int) -> np.ndarray:
    """n fixed deterministic directions of unit max-norm in R^m (for d2g)."""
    V = np.cos(1.3 * (np.arange(n)[:, None] + 1) * np.arange(1, m + 1)[None, :] + 0.4 * np.arange(n)[:, None])
    return V / np.abs(V).max(axis=1, keepdims=True)


def check_derivatives(problem) -> None:
    """grad_U, G and d2g against central differences, the compiled callbacks against the numpy ones.

    Points: ``probes.probe_points(q0)`` (q0 and three points near it); step h = STEP * (1 + max |q0|)."""
    P = probe_points(problem.q0)
    n, m = P.shape
    size = 1.0 + float(np.abs(problem.q0).max())
    h = STEP * size
    shift = h * np.eye(m)
    X = np.concatenate([(P[:, None, :] + shift).reshape(-1, m), (P[:, None, :] - shift).reshape(-1, m)])
    with np.errstate(all="ignore"):
        U = np.asarray(problem.U(X), dtype=float).reshape(2, n, m)
        U0 = np.abs(np.asarray(problem.U(P), dtype=float))
        fd = (U[0] - U[1]) / (2 * h)
        _compare(problem, "grad_U", "the central differences of U", problem.grad_U(P), fd, FLOOR * U0 / size, P, TOL)
        if problem.nu:
            nu = problem.nu
            g = np.asarray(problem.g(X), dtype=float).reshape(2, n, m, nu)
            G = np.asarray(problem.G(P), dtype=float)
            g0 = np.abs(np.asarray(problem.g(P), dtype=float)).max(axis=1)
            fdG = (g[0] - g[1]) / (2 * h)
            _compare(problem, "G", "the central differences of g", G, fdG, FLOOR * g0 / size, P, TOL)
            if problem.d2g is not None:
                V = _directions(m, n)
                GV = np.asarray(problem.G(np.concatenate([P + h * V, P - h * V])), dtype=float).reshape(2, n, m, nu)
                fd2 = np.einsum("nmi,nm->ni", (GV[0] - GV[1]) / (2 * h), V)
                floor = FLOOR * np.abs(G).reshape(n, -1).max(axis=1) / size
                _compare(problem, "d2g", "the central differences of G", problem.d2g(P, V), fd2, floor, P, TOL)
    if problem.kernels is not None:
        _check_kernels(problem, P)


def _python_function(value):
    """The Python function of a compiled callback (an njit dispatcher's py_func, a ``kernel``-marked function, or
    a 'module:function' string's), or None when it cannot be had here (the compiled loop reports that)."""
    if isinstance(value, str):
        module, _, attr = value.partition(":")
        try:
            value = importlib.import_module(module)
            for part in attr.split("."):
                value = getattr(value, part)
        except (ImportError, AttributeError):
            return None
    value = getattr(value, "py_func", value)
    return value if callable(value) else None


def _check_kernels(problem, P: np.ndarray) -> None:
    """Each compiled callback (run as Python, nothing compiled) against its numpy twin at the points P."""
    kernels = problem.kernels
    params = np.asarray(getattr(kernels, "params", ()), dtype=float)
    n, m, nu = len(P), problem.m, problem.nu
    shapes = {"grad_U": (n, m), "G": (n, m, nu), "g": (n, nu)}
    for key, shape in shapes.items():
        numpy_f = getattr(problem, key, None)
        f = _python_function(getattr(kernels, key, None))
        if f is None or numpy_f is None or (key != "grad_U" and not nu):
            continue
        out = np.zeros(shape)
        try:
            with np.errstate(all="ignore"):
                f(P, out, params)
        except Exception:  # noqa: BLE001 - code that only runs compiled: the compiled loop reports its errors
            continue
        want = np.asarray(numpy_f(P), dtype=float)
        floor = np.zeros(n)
        _compare(problem, f"kernels.{key}", f"the numpy callback {key}", out, want, floor, P, TOL_KERNEL)


__all__ = ["STEP", "TOL", "VECTORISED", "check_derivatives", "check_vectorised", "derivative_checks", "enabled"]
