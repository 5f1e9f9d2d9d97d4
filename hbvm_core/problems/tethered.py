"""Three satellites in a central field joined by rigid tethers of unit length (docs/method.md 4.4).

q = (q1, q2, q3), q_i in R^3; U = -sum_i 1/|q_i|;
g = (|q1-q2|^2 - 1, |q2-q3|^2 - 1, |q3-q1|^2 - 1); p3 = (v, 0, 0) with H(q0, p0) = 0.
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels import Kernels, kernel
from ..problem import Problem

PAIRS = ((0, 1), (1, 2), (2, 0))
Q0 = np.array([0.0, 0.5, 20.0, 0.0, -0.5, 20.0, 0.0, 0.0, 20.0 - np.sqrt(3.0) / 2.0])


def _speed() -> float:
    """v with v^2/2 = sum_i 1/|q_i| so that H(q0, p0) = 0 (= 0.5517822421601886)."""
    r = np.linalg.norm(Q0.reshape(3, 3), axis=1)
    return float(np.sqrt(2.0 * np.sum(1.0 / r)))


def _bodies(Q):
    return Q.reshape(Q.shape[0], 3, 3)


def U(Q):
    return -np.sum(1.0 / np.linalg.norm(_bodies(Q), axis=2), axis=1)


def grad_U(Q):
    B = _bodies(Q)
    r = np.linalg.norm(B, axis=2, keepdims=True)
    return (B / r**3).reshape(Q.shape)


def g(Q):
    B = _bodies(Q)
    return np.stack([np.sum((B[:, i] - B[:, j]) ** 2, axis=1) - 1.0 for i, j in PAIRS], axis=1)


def G(Q):
    B = _bodies(Q)
    out = np.zeros((Q.shape[0], 3, 3, 3))  # (n, body, xyz, constraint)
    for c, (i, j) in enumerate(PAIRS):
        d = 2.0 * (B[:, i] - B[:, j])
        out[:, i, :, c] = d
        out[:, j, :, c] = -d
    return out.reshape(Q.shape[0], 9, 3)


def d2g(Q, V):
    W = _bodies(V)
    return np.stack([2.0 * np.sum((W[:, i] - W[:, j]) ** 2, axis=1) for i, j in PAIRS], axis=1)


# Compiled callbacks (hbvm_core.kernels): fill ``out`` at the rows of Q; ``params`` unused. The loop over the
# points is the innermost, one pass per output column: the lockstep blocks hand Fortran-ordered views (a column's
# points contiguous, one per lane), where such a loop vectorises; a loop over points outside writing 27 columns
# per point does not (docs/performance.md, "Compiled callbacks for your own problem").
@kernel
def grad_U_kernel(Q, out, params):
    """U = -sum_i 1/|q_i|: grad = q_i / |q_i|^3 for the three bodies."""
    for b in range(3):
        for i in range(Q.shape[0]):
            x, y, z = Q[i, 3 * b], Q[i, 3 * b + 1], Q[i, 3 * b + 2]
            r = math.sqrt(x * x + y * y + z * z)
            r3 = r * r * r
            out[i, 3 * b] = x / r3
            out[i, 3 * b + 1] = y / r3
            out[i, 3 * b + 2] = z / r3


@kernel
def G_kernel(Q, out, params):
    """g_c = |q_i - q_j|^2 - 1 for the pairs (1,2), (2,3), (3,1): columns +-2 (q_i - q_j), 0 for the third body."""
    for c in range(3):
        bi, bj, bk = c, (c + 1) % 3, (c + 2) % 3
        for x in range(3):
            for i in range(Q.shape[0]):
                d = 2.0 * (Q[i, 3 * bi + x] - Q[i, 3 * bj + x])
                out[i, 3 * bi + x, c] = d
                out[i, 3 * bj + x, c] = -d
                out[i, 3 * bk + x, c] = 0.0


@kernel
def g_kernel(Q, out, params):
    """g_c = |q_i - q_j|^2 - 1 for the pairs (1,2), (2,3), (3,1) (for the compiled RATTLE)."""
    for i in range(Q.shape[0]):
        for c in range(3):
            bi, bj = c, (c + 1) % 3
            acc = 0.0
            for x in range(3):
                d = Q[i, 3 * bi + x] - Q[i, 3 * bj + x]
                acc += d * d
            out[i, c] = acc - 1.0


def tethered_satellites() -> Problem:
    """m = 9, nu = 3 (table4, fig3); no closed form."""
    p0 = np.zeros(9)
    p0[6] = _speed()
    return Problem(
        name="tethered_satellites",
        q0=Q0,
        p0=p0,
        U=U,
        grad_U=grad_U,
        g=g,
        G=G,
        d2g=d2g,
        kernels=Kernels(grad_U=f"{__name__}:grad_U_kernel", G=f"{__name__}:G_kernel", g=f"{__name__}:g_kernel"),
    )
