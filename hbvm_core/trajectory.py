"""A computed trajectory: the saved states, the multipliers and iteration counts per step."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ConfigError
from .problem import Problem


@dataclass
class Trajectory:
    """Saved points (t, q, p) and per-step data (tstep, lam, iterations).

    lam[i] is the multiplier used on [tstep[i], tstep[i] + h] and approximates
    lambda(tstep[i]) (docs/method.md 3). With save_every = 1, t = n h (n = 0..N) and
    tstep = n h (n = 0..N-1).
    """

    problem: Problem
    method: Any
    h: float
    t: np.ndarray
    q: np.ndarray
    p: np.ndarray
    tstep: np.ndarray
    lam: np.ndarray
    iterations: np.ndarray
    attrs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        """A few lines in xarray's spirit (no arrays): problem, method, h, steps, sizes, backend, and the
        largest energy and constraint errors."""
        name = getattr(self.method, "name", self.method)
        iters = self.attrs.get("mean_iterations", math.nan)
        lines = [
            f"<hbvm_core.Trajectory> {self.problem.name}, {name}, h = {self.h:.6g}, {_count(self.steps, 'step')}",
            f"  t:       {self.t[0]:.6g} .. {self.t[-1]:.6g} ({_count(len(self.t), 'saved point')})",
            f"  sizes:   q, p {self.q.shape}, lam {self.lam.shape}",
            f"  backend: {self.attrs.get('backend', '?')}, mean iterations {iters:.3g}",
        ]
        try:
            e_H = float(self.energy_error().max())
            e_g = float(np.abs(self.g()).max()) if self.problem.nu else 0.0
            lines.append(f"  errors:  max |H - H(y_0)| = {e_H:.3e}, max |g(q)| = {e_g:.3e}")
        except Exception as exc:  # a repr never raises: the callbacks may fail on a store's data
            lines.append(f"  errors:  not evaluated ({type(exc).__name__})")
        return "\n".join(lines)

    @property
    def steps(self) -> int:
        return int(self.attrs.get("steps", len(self.t) - 1))

    def H(self) -> np.ndarray:
        """H(q_n, p_n) at the saved points."""
        return self.problem.hamiltonian(self.q, self.p)

    def g(self) -> np.ndarray:
        """g(q_n), shape (points, nu)."""
        return self.problem.constraint(self.q)

    def hidden(self) -> np.ndarray:
        """Hidden constraint G(q_n)^T M^{-1} p_n, shape (points, nu)."""
        return self.problem.hidden_constraint(self.q, self.p)

    def energy_error(self) -> np.ndarray:
        """|H(y_n) - H(y_0)|."""
        H = self.H()
        return np.abs(H - H[0])

    def y(self) -> np.ndarray:
        """The state y = (q, p), shape (points, 2m)."""
        return np.concatenate([self.q, self.p], axis=1)

    def at(self, times: np.ndarray) -> np.ndarray:
        """Indices of the saved points at the given times (which must lie on the grid)."""
        return _grid_indices(self.t, times, self.h)

    def at_step(self, times: np.ndarray) -> np.ndarray:
        """Indices of the per-step data at the given times."""
        return _grid_indices(self.tstep, times, self.h)


def _count(n: int, what: str) -> str:
    """'1 step', '2 steps'."""
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _grid_indices(grid: np.ndarray, times: np.ndarray, h: float) -> np.ndarray:
    times = np.atleast_1d(np.asarray(times, dtype=float))
    idx = np.searchsorted(grid, times - 1e-9 * h)
    idx = np.clip(idx, 0, len(grid) - 1)
    bad = np.abs(grid[idx] - times) > 1e-6 * h
    if np.any(bad):
        raise ConfigError(f"time {float(times[bad][0])!r} is not on the saved grid (h = {h!r})")
    return idx
