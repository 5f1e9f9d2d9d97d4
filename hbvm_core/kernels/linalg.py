"""The small linear algebra of the compiled loops, written once and pasted by the generator into each template.

``registry.expand_inline`` pastes these ``@inline_source`` helpers into their call sites, like the rules of
``rules.py``: no array crosses a call in the compiled loop. Their locals are spelled apart from the callers'
(they become the caller's locals). Imports no numba (numba compiles the pasted code).

- ``minv``: x <- M^{-1} x by the lower Cholesky factor M = L L^T (``runner.cholesky_factor``; a diagonal M
  has a diagonal factor), a no-op for the empty factor of M = I (the lockstep blocks rewrite this source too);
- ``solve_small``: b <- A^{-1} b by Gaussian elimination with partial pivoting, False when A is singular or
  not finite (as ``methods._small.solve_small`` raises for the numpy path): the one small dense solve of every
  template and form (the lockstep blocks rewrite this source, ``kernels/lanes.py``).
"""

from __future__ import annotations

import numpy as np  # noqa: F401 (the pasted code's np is the template's)

from .rules import inline_source


@inline_source
def minv(L, x):
    """x <- M^{-1} x in place for a vector x: forward then back substitution with L (no-op for M = I).

    Its sizes are ``L.shape[0]`` (no local), so that the lockstep form (``kernels/lanes.py``) is this same source
    rewritten: there the size is the constant L_SIZE and the triangular loops unroll."""
    for minv_a in range(L.shape[0]):
        minv_acc = x[minv_a]
        for minv_c in range(minv_a):
            minv_acc -= L[minv_a, minv_c] * x[minv_c]
        x[minv_a] = minv_acc / L[minv_a, minv_a]
    for minv_a in range(L.shape[0] - 1, -1, -1):
        minv_acc = x[minv_a]
        for minv_c in range(minv_a + 1, L.shape[0]):
            minv_acc -= L[minv_c, minv_a] * x[minv_c]
        x[minv_a] = minv_acc / L[minv_a, minv_a]


@inline_source
def solve_small(A, b, n):
    """b <- A^{-1} b by Gaussian elimination with partial pivoting (A overwritten); False if singular.

    Written without an early exit and with the row swap as a loop over the candidate rows, so that the lockstep
    form (``kernels/lanes.py``) is this same source rewritten: a per-lane branch becomes masked stores, and the
    swap with row ``piv`` is a blend sw x + (1 - sw) y per candidate row, sw 0 or 1, with no branch (no gather at a
    per-lane index; as a masked tuple swap the lockstep loop took wrong rows where a lane pivoted: a formula
    problem with l1 < l2, tests/verification/test_lanes_params.py). Once a pivot column is zero
    or not finite, the columns after it are searched but not eliminated, and there is no back substitution."""
    nonsingular = True
    for col in range(n):
        piv, big = col, abs(A[col, col])
        for row in range(col + 1, n):
            if abs(A[row, col]) > big:
                piv, big = row, abs(A[row, col])
        if big == 0.0 or not np.isfinite(big):
            nonsingular = False
        if nonsingular:
            for row in range(col + 1, n):
                sw = 1.0 if row == piv else 0.0  # the swap as a blend: exact for finite values (sw is 0 or 1)
                for jj in range(n):
                    a_col, a_row = A[col, jj], A[row, jj]
                    A[col, jj] = sw * a_row + (1.0 - sw) * a_col
                    A[row, jj] = sw * a_col + (1.0 - sw) * a_row
                b_col, b_row = b[col], b[row]
                b[col] = sw * b_row + (1.0 - sw) * b_col
                b[row] = sw * b_col + (1.0 - sw) * b_row
            for row in range(col + 1, n):
                fac = A[row, col] / A[col, col]
                if fac != 0.0:
                    for jj in range(col + 1, n):
                        A[row, jj] -= fac * A[col, jj]
                    b[row] -= fac * b[col]
    if nonsingular:
        for col in range(n - 1, -1, -1):
            acc_s = b[col]
            for jj in range(col + 1, n):
                acc_s -= A[col, jj] * b[jj]
            b[col] = acc_s / A[col, col]
    return nonsingular
