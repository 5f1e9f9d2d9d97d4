"""The rules every time loop shares, the numpy path and each compiled template: defined once here.

- ``converged``: the round-off stopping rule of an iteration (docs/method.md 3, "Solving the step"),
  with d the max-norm of the last increment, d_prev the one before and scale = max(1, |iterate|):
  converged when d <= rtol scale, or when d <= stall scale and d >= d_prev (the increments stopped
  decreasing at round-off). ``solvers.StoppingRule.done`` calls it; the compiled templates get it
  pasted into their loops (``@inline_source``: ``registry.expand_inline`` pastes this module's
  helpers into every template, numba then sees plain arithmetic).
- the status codes of a compiled loop's ``run_chunk`` (``kernels.runner`` turns them into errors).

Imports nothing (no numba): the numpy path imports it too.
"""

from __future__ import annotations

#: run_chunk's status codes, in every template
OK, NO_CONVERGENCE, DIVERGED, SINGULAR, NON_FINITE_STATE = 0, 1, 2, 3, 4


def inline_source(f):
    """Marks a helper that the generator pastes into its call sites (``registry.expand_inline``); called as
    it stands by the numpy path. Its only ``return`` is its last statement."""
    return f


@inline_source
def converged(d, d_prev, scale, rtol, stall):
    """The stopping rule: d <= rtol scale, or d <= stall scale with d >= d_prev (stalled at round-off)."""
    return d <= rtol * scale or (d <= stall * scale and d >= d_prev)
