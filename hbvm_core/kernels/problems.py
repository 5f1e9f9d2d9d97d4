"""Compiled callbacks of the built-in problems (METHOD.md section 4), writing into preallocated arrays.

Each ``grad_U(Q, out, params)`` fills out (n, m) with the gradient of U at the
rows of Q (n, m); each ``G(Q, out, params)`` fills out (n, m, nu) with the
constraint gradients (``params``: the problem's ``Kernels.params``, unused
here). They mirror the numpy callbacks in ``hbvm_core.problems`` (integer
powers as products rather than libm ``pow``, which costs ~30 ns a call), so
both paths agree to round-off (a few ulp per evaluation).
"""

from __future__ import annotations

import math

from numba import njit


@njit(cache=True)
def no_constraints(Q, out, params):
    """G for an unconstrained problem (nu = 0): nothing to write."""


@njit(cache=True)
def sphere_G(Q, out, params):
    """g = |q|^2 - 1: G = 2 q (planar and conical pendulum)."""
    for i in range(Q.shape[0]):
        for a in range(Q.shape[1]):
            out[i, a, 0] = 2.0 * Q[i, a]


@njit(cache=True)
def planar_grad_U(Q, out, params):
    """U = y."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 1.0


@njit(cache=True)
def conical_grad_U(Q, out, params):
    """U = z."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 0.0
        out[i, 2] = 1.0


@njit(cache=True)
def modified_grad_U(Q, out, params):
    """U = z^4."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 0.0
        z = Q[i, 2]
        out[i, 2] = 4.0 * (z * z * z)


@njit(cache=True)
def modified_G(Q, out, params):
    """g = x^6 + y^4 + z^2 - 0.625: G = (6 x^5, 4 y^3, 2 z)."""
    for i in range(Q.shape[0]):
        x, y = Q[i, 0], Q[i, 1]
        x2 = x * x
        out[i, 0, 0] = 6.0 * (x2 * x2 * x)
        out[i, 1, 0] = 4.0 * (y * y * y)
        out[i, 2, 0] = 2.0 * Q[i, 2]


@njit(cache=True)
def tethered_grad_U(Q, out, params):
    """U = -sum_i 1/|q_i|: grad = q_i / |q_i|^3 for the three bodies."""
    for i in range(Q.shape[0]):
        for b in range(3):
            x, y, z = Q[i, 3 * b], Q[i, 3 * b + 1], Q[i, 3 * b + 2]
            r = math.sqrt(x * x + y * y + z * z)
            r3 = r * r * r
            out[i, 3 * b] = x / r3
            out[i, 3 * b + 1] = y / r3
            out[i, 3 * b + 2] = z / r3


@njit(cache=True)
def tethered_G(Q, out, params):
    """g_c = |q_i - q_j|^2 - 1 for the pairs (1,2), (2,3), (3,1): columns +-2 (q_i - q_j)."""
    for i in range(Q.shape[0]):
        for a in range(9):
            for c in range(3):
                out[i, a, c] = 0.0
        for c in range(3):
            bi, bj = c, (c + 1) % 3
            for x in range(3):
                d = 2.0 * (Q[i, 3 * bi + x] - Q[i, 3 * bj + x])
                out[i, 3 * bi + x, c] = d
                out[i, 3 * bj + x, c] = -d


@njit(cache=True)
def theta_grad_U(Q, out, params):
    """U = -cos(theta): grad = sin(theta)."""
    for i in range(Q.shape[0]):
        out[i, 0] = math.sin(Q[i, 0])
