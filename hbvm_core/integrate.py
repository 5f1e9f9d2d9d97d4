"""The time loop: fixed steps of a method from (q0, p0), optionally compensated, saved in chunks.

Kahan (compensated) summation of the increments q += dq, p += dp keeps the
round-off of the update at one ulp (docs/method.md 3). Points are saved every
``save_every`` steps (and at the end); a ``sink`` receives them in chunks of
``chunk`` saved points, so memory does not grow with the number of steps.
"""

from __future__ import annotations

import math
import time
import weakref
from typing import Protocol

import numpy as np

from .errors import ConfigError, ConvergenceError, NonFiniteError
from .kernels.rules import buffer_rows, compensated_add, name_failed_step, point_saved, step_saved
from .problem import Problem
from .trajectory import Trajectory


class Sink(Protocol):
    """Receives a trajectory in chunks (an in-memory one is the default; storage has a Zarr one)."""

    def points(self, start: int, t: np.ndarray, q: np.ndarray, p: np.ndarray) -> None: ...
    def steps(self, start: int, t: np.ndarray, lam: np.ndarray, iterations: np.ndarray) -> None: ...


class MemorySink:
    """Keeps every chunk in memory and assembles the arrays at the end."""

    def __init__(self) -> None:
        self._points: list[tuple] = []
        self._steps: list[tuple] = []

    def points(self, start, t, q, p):
        self._points.append((t.copy(), q.copy(), p.copy()))

    def steps(self, start, t, lam, iterations):
        self._steps.append((t.copy(), lam.copy(), iterations.copy()))

    def arrays(self, m: int, nu: int) -> dict[str, np.ndarray]:
        def cat(chunks, i, shape):
            return np.concatenate([c[i] for c in chunks]) if chunks else np.zeros(shape)

        return {
            "t": cat(self._points, 0, (0,)),
            "q": cat(self._points, 1, (0, m)),
            "p": cat(self._points, 2, (0, m)),
            "tstep": cat(self._steps, 0, (0,)),
            "lam": cat(self._steps, 1, (0, nu)),
            "iterations": cat(self._steps, 2, (0,)),
        }


def number_of_steps(h: float, t_end: float) -> int:
    """N = t_end / h, which must be a whole number (to 1e-9 relative)."""
    if not (isinstance(h, (int, float, np.floating)) and math.isfinite(h) and h > 0):
        raise ConfigError(f"h = {h!r}: expected a finite step size > 0")
    if not (isinstance(t_end, (int, float, np.floating)) and math.isfinite(t_end) and t_end > 0):
        raise ConfigError(f"t_end = {t_end!r}: expected a finite end time > 0")
    if h > t_end * (1 + 1e-9):
        raise ConfigError(f"h = {h!r} is larger than the interval [0, {t_end!r}]: not even one step fits")
    n = round(t_end / h)
    if n < 1 or abs(n * h - t_end) > 1e-9 * t_end:
        raise ConfigError(f"h = {h!r} does not divide the interval [0, {t_end!r}] into whole steps")
    return int(n)


def integrate(
    problem: Problem,
    method,
    h: float,
    t_end: float,
    *,
    compensated: bool = True,
    save_every: int = 1,
    chunk: int = 65536,
    sink: Sink | None = None,
    backend: str = "auto",
) -> Trajectory:
    """Integrate ``problem`` with ``method`` at fixed step ``h`` on [0, t_end].

    Parameters
    ----------
    problem : Problem
        The constrained (or unconstrained) Hamiltonian system.
    method : Method
        E.g. ``HBVM(6, 2)``, ``RATTLE()``, ``DOP853(1e-10)`` (``hbvm_core.methods``).
    h, t_end : float
        Step size and end time; ``t_end / h`` must be a whole number.
    compensated : bool
        Kahan summation of the q, p increments (docs/method.md 3).
    save_every : int
        Keep every ``save_every``-th point (and the last).
    chunk : int
        Rows per block handed to ``sink``.
    sink : Sink, optional
        Receives the trajectory in blocks; default: kept in memory.
    backend : {"auto", "numpy", "numba"}
        "auto": the compiled loop where the problem and method have one.

    Returns
    -------
    Trajectory
        Points, multipliers, iterations and attrs; its arrays are empty when a
        ``sink`` was given (the data went there).

    Raises
    ------
    ConfigError
        For a bad h, t_end, save_every, chunk or backend, or backend="numba" without a compiled loop.
    ConvergenceError
        When a step's iteration fails (naming the step and time).
    NonFiniteError
        When a callback returns NaN/inf at a step's stages.
    """
    N = number_of_steps(h, t_end)
    if not (isinstance(save_every, (int, np.integer)) and save_every >= 1):
        raise ConfigError(f"save_every = {save_every!r}: expected an integer >= 1")
    if not (isinstance(chunk, (int, np.integer)) and chunk >= 1):
        raise ConfigError(f"chunk = {chunk!r}: expected an integer >= 1")
    own_sink = sink is None
    sink = MemorySink() if own_sink else sink
    runner = _select_runner(problem, method, backend)
    t0 = time.perf_counter()
    stats = runner(problem, method, float(h), N, compensated, int(save_every), int(chunk), sink)
    wall = time.perf_counter() - t0
    attrs = {
        "steps": N,
        "h": float(h),
        "t_end": float(t_end),
        "save_every": int(save_every),
        "compensated": bool(compensated),
        "wall_s": wall,
        "mean_iterations": stats["iterations"] / N,
        "max_iterations": int(stats["max_iterations"]),
        "backend": stats.get("backend", "numpy"),
        # the multiplier systems: dense, or on the problem's sparse G (hbvm_core.sparse, chosen by size)
        "linear_algebra": stats.get("linear_algebra", "dense"),
        # the sparse path's fixed-point sweep: compiled (hbvm_core.sparse.compiled) or numpy; none elsewhere
        "sparse_sweep": stats.get("sparse_sweep", "none"),
    }
    arrays = sink.arrays(problem.m, problem.nu) if own_sink else _empty(problem)
    return Trajectory(problem=problem, method=method, h=float(h), attrs=attrs, **arrays)


def _empty(problem: Problem) -> dict[str, np.ndarray]:
    return MemorySink().arrays(problem.m, problem.nu)


def _select_runner(problem: Problem, method, backend: str):
    if backend not in ("auto", "numpy", "numba"):
        raise ConfigError(f"backend = {backend!r}: expected auto, numpy or numba")
    if backend != "numpy":
        runner = compiled_runner(problem, method)
        if runner is not None:
            return runner
        if backend == "numba":
            raise ConfigError(f"backend = 'numba': no compiled kernel for {problem.name} with {method.name}")
    return python_runner


#: (id(problem), method) -> (weak reference to the problem, what the runner was built from, the runner)
_RUNNERS: dict[tuple, tuple] = {}
_RUNNERS_MAX = 64


def _built_from(problem: Problem) -> tuple:
    """What a compiled runner is built from: compiled and numpy callbacks, M (compared by identity)."""
    return (problem.kernels, problem.M, problem.grad_U, problem.G, problem.g, problem.q0)


def compiled_runner(problem: Problem, method):
    """``method.compiled_runner(problem)``, built once per (problem object, method) and reused while the problem
    keeps the same callbacks and M: building one finds the loop module, copies the coefficient tables and
    checks the compiled callbacks against the numpy ones, most of the fixed cost of a short run."""
    key = (id(problem), method)
    try:
        hit = _RUNNERS.get(key)
    except TypeError:  # an unhashable method: nothing to key on
        return method.compiled_runner(problem)
    now = _built_from(problem)
    if hit is not None and hit[0]() is problem and all(a is b for a, b in zip(hit[1], now)):
        return hit[2]
    runner = method.compiled_runner(problem)
    if len(_RUNNERS) >= _RUNNERS_MAX:
        _RUNNERS.pop(next(iter(_RUNNERS)))
    _RUNNERS[key] = (weakref.ref(problem), now, runner)
    return runner


def saved(n: int, N: int, save_every: int) -> bool:
    """Whether point n (0..N) is saved (the save rule of ``kernels.rules``, shared with the compiled loops)."""
    return point_saved(n, N, save_every)


def python_runner(
    problem: Problem, method, h: float, N: int, compensated: bool, save_every: int, chunk: int, sink, stepper=None
):
    """The reference (numpy) time loop over the method's stepper (or the ``stepper`` given)."""
    stepper = method.stepper(problem) if stepper is None else stepper
    m, nu = problem.m, problem.nu
    q, p = problem.q0.copy(), problem.p0.copy()
    cq, cp = np.zeros(m), np.zeros(m)
    rows = buffer_rows(chunk, N, save_every)
    pts = _Buffer(sink.points, rows, [(), (m,), (m,)])
    stp = _Buffer(sink.steps, rows, [(), (nu,), ()], dtypes=[float, float, np.int32])
    pts.add(0.0, q, p)
    total, worst = 0, 0
    for n in range(N):
        t = n * h
        try:
            dq, dp, lam, it = stepper.step(q, p, h, n, t)
        except (ConvergenceError, NonFiniteError):
            name_failed_step(problem, n, h, q)
            raise
        start = q
        if compensated:
            q, cq = _kahan(q, dq, cq)
            p, cp = _kahan(p, dp, cp)
        else:
            q, p = q + dq, p + dp
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(p))):
            name_failed_step(problem, n, h, start, q)
            raise ConvergenceError(n, t, float("nan"), it, "non-finite state after the step")
        total += it
        worst = max(worst, it)
        if step_saved(n, save_every):
            stp.add(t, lam, it)
        if saved(n + 1, N, save_every):
            pts.add((n + 1) * h, q, p)
    pts.flush()
    stp.flush()
    algebra, sweep = getattr(stepper, "linear_algebra", "dense"), getattr(stepper, "sparse_sweep", "none")
    return {"iterations": total, "max_iterations": worst, "backend": "numpy", "linear_algebra": algebra,
            "sparse_sweep": sweep}  # fmt: skip


def _kahan(x: np.ndarray, dx: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x + dx with compensation c carried to the next update (``kernels.rules.compensated_add``, elementwise)."""
    return compensated_add(x, dx, c)


class _Buffer:
    """Fixed-size rows of several arrays, flushed to a sink callback when full."""

    def __init__(self, emit, size: int, shapes, dtypes=None):
        dtypes = dtypes or [float] * len(shapes)
        self.emit, self.size, self.start, self.n = emit, size, 0, 0
        self.arrays = [np.empty((size,) + s, dtype=d) for s, d in zip(shapes, dtypes)]

    def add(self, *row) -> None:
        for a, v in zip(self.arrays, row):
            a[self.n] = v
        self.n += 1
        if self.n == self.size:
            self.flush()

    def flush(self) -> None:
        if self.n:
            self.emit(self.start, *(a[: self.n] for a in self.arrays))
            self.start += self.n
            self.n = 0
