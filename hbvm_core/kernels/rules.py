"""The rules every time loop shares, the numpy path and each compiled template: defined once here.

- ``converged``: the round-off stopping rule of an iteration (docs/method.md 3, "Solving the step"),
  with d the max-norm of the last increment, d_prev the one before and scale = max(1, |iterate|):
  converged when d <= rtol scale, or when d <= stall scale and d >= d_prev (the increments stopped
  decreasing at round-off). ``fixed_point.StoppingRule.done`` calls it; the compiled templates get it
  pasted into their loops (``@inline_source``: ``registry.expand_inline`` pastes this module's
  helpers into every template, numba then sees plain arithmetic).
- ``compensated_add``: the compensated (Kahan) update x + dx with the carried compensation c (docs/method.md 3);
  ``integrate.python_runner`` calls it on arrays, the templates on each coordinate.
- the save rule: ``step_saved`` (the multiplier and iterations of step n are kept when n % save_every == 0),
  ``point_saved`` (point n of 0..N is kept when n % save_every == 0, and the last); ``save_rows`` writes one
  step's rows into a compiled loop's buffers by that rule (the numpy path's ``_Buffer`` does it there).
- ``record_failure``: a failed step's status, step, iterations and increment into ``info``;
- ``buffer_rows``: the rows of a save buffer, the numpy path's and the compiled loops';
- the status codes of a compiled loop's ``run_chunk`` (``kernels.driver`` turns them into errors);
- ``name_failed_step``: which step a failure that a callback's non-finite value caused is charged to, for every
  method and path (the numpy loop in ``integrate``, the compiled ones in ``kernels.driver``).

Imports numpy only (no numba): the numpy path imports it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a type only: problem.py is a layer above kernels
    from ..problem import Problem

# the fields of run_chunk's state and info: set by the generated module from the loop's description
# (kernels/description.py, ``field_source``)
STATE_N = STATE_HAVE_PREV = STATE_POINTS = STATE_STEPS = STATE_ITERATIONS = STATE_MAX_ITERATIONS = None
STATE_COMPENSATED = INFO_STATUS = INFO_STEP = INFO_ITERATIONS = INFO_INCREMENT = None

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


@inline_source
def compensated_add(x, dx, c):
    """(x + dx, c') by Kahan summation: c carries the rounding error of the previous additions (docs/method.md 3)."""
    kahan_y = dx - c
    kahan_sum = x + kahan_y
    return kahan_sum, (kahan_sum - x) - kahan_y


@inline_source
def step_saved(n, save_every):
    """Whether step n's multiplier and iteration count are saved (at t_n)."""
    return n % save_every == 0


@inline_source
def point_saved(n, N, save_every):
    """Whether point n (0..N) is saved: every save_every-th, and the last."""
    return n % save_every == 0 or n == N


@inline_source
def save_rows(n, N, h, save_every, q, p, lam, it, state, pt_t, pt_q, pt_p, st_t, st_lam, st_it, cap, m, nu):
    """After step n (t_n -> t_{n+1}): the step's row (t_n, lambda, iterations) and the point's row (t_{n+1}, q, p)
    by the save rule; state's fields STATE_STEPS, STATE_POINTS count the rows in the buffers. Returns whether a
    buffer is full."""
    buffer_full = False
    keep_step = step_saved(n, save_every)
    if keep_step:
        row = state[STATE_STEPS]
        st_t[row] = n * h
        for r in range(nu):
            st_lam[row, r] = lam[r]
        st_it[row] = it
        state[STATE_STEPS] = row + 1
        buffer_full = row + 1 == cap
    keep_point = point_saved(n + 1, N, save_every)
    if keep_point:
        row = state[STATE_POINTS]
        pt_t[row] = (n + 1) * h
        for a in range(m):
            pt_q[row, a] = q[a]
            pt_p[row, a] = p[a]
        state[STATE_POINTS] = row + 1
        buffer_full = buffer_full or row + 1 == cap
    return buffer_full


@inline_source
def record_failure(info, status, n, it, d):
    """info <- the failed step's status, its step n, its iterations and its last increment (by their fields)."""
    info[INFO_STATUS] = status
    info[INFO_STEP] = n
    info[INFO_ITERATIONS] = it
    info[INFO_INCREMENT] = d


def buffer_rows(chunk: int, N: int, save_every: int) -> int:
    """Rows of a save buffer (this loop's and the compiled ones'): ``chunk``, or fewer when the whole run fits
    (at most N // save_every + 2 points, the initial one included): a short run does not allocate a full chunk."""
    return min(chunk, N // save_every + 2)


def name_failed_step(problem: Problem, n: int, h: float, q_start: np.ndarray, q_end: np.ndarray | None = None) -> None:
    """After step n failed: NonFiniteError naming the step that took the trajectory where a callback is not finite,
    one way for every method and path (docs/method.md, "Solving the step": step n is on [t_n, t_{n+1}], counted
    from 0, t_n = n h): the step before (n - 1) when a callback is already not finite at q_start = q_n, the end
    of that step; step n when it is at q_end = q_{n+1} (a method that evaluates its end point). Nothing else."""
    if n > 0 and np.all(np.isfinite(q_start)):
        problem.check_finite(q_start[None, :], n - 1, (n - 1) * h)
    if q_end is not None and np.all(np.isfinite(q_end)):
        problem.check_finite(q_end[None, :], n, n * h)
