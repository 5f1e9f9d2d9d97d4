"""The fixed-point iteration of one step's nonlinear system and its stopping rule (docs/method.md 3).

``fixed_point`` takes the map F(gamma) -> (gamma_new, aux) of a method (every HBVM map: the fixed-point
sweep, and the blended iteration as ``blended.newton_map``) and returns the converged (gamma, aux,
iterations). Stopping rule, with d_i = max|gamma_{i+1} - gamma_i| and scale = max(1, max|gamma_{i+1}|):

- converged when d_i <= rtol * scale (rtol defaults to 4 eps), or
- converged when d_i <= stall_rtol * scale (1000 eps) and d_i >= d_{i-1}
  (the increments stopped decreasing at round-off level);
- ConvergenceError after ``max_iter`` sweeps, or at once if d_i is not finite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import ConvergenceError
from .kernels.rules import converged

EPS = float(np.finfo(float).eps)


@dataclass(frozen=True)
class StoppingRule:
    """Round-off stopping rule shared by every solver."""

    rtol: float = 4 * EPS
    stall_rtol: float = 1000 * EPS
    max_iter: int = 100

    def done(self, d: float, d_prev: float, scale: float) -> bool:
        """The rule of ``kernels.rules.converged`` (defined once there, for the compiled loops too)."""
        return converged(d, d_prev, scale, self.rtol, self.stall_rtol)


def fixed_point(
    F: Callable[[np.ndarray], tuple[np.ndarray, object]],
    gamma: np.ndarray,
    rule: StoppingRule,
    step: int = 0,
    t: float = 0.0,
    terms: Callable[[], tuple[float, float]] | None = None,
) -> tuple[np.ndarray, object, int]:
    """Iterate gamma <- F(gamma) to round-off; returns (gamma, aux of the last sweep, sweeps).

    ``terms``, where given, returns (the size of the largest term the last sweep summed into gamma, that size
    times the amplification of the multiplier solve's round-off): the scale of the rule includes the first,
    since gamma's round-off is relative to the terms (a chain of many links: tensions h rho lam far larger than
    gamma, which they nearly cancel), and the stall test (increments no longer decreasing) accepts increments
    up to ``stall_rtol`` times the second (G^T M^-1 G of a chain of n links has condition ~n^2)."""
    d_prev = np.inf
    for it in range(1, rule.max_iter + 1):
        new, aux = F(gamma)
        d = float(np.max(np.abs(new - gamma)))
        if not np.isfinite(d):
            raise ConvergenceError(step, t, d, it, "non-finite increment (diverged)")
        size, amplified = terms() if terms is not None else (0.0, 0.0)
        scale = max(1.0, float(np.max(np.abs(new))), size)
        gamma = new
        if rule.done(d, d_prev, scale) or (d >= d_prev and d <= rule.stall_rtol * amplified):
            return gamma, aux, it
        d_prev = d
    raise ConvergenceError(step, t, d, rule.max_iter, "no convergence")
