"""Pendula on a sphere-like surface in R^3: the conical and the modified pendulum (docs/method.md 4.2, 4.3)."""

from __future__ import annotations

import numpy as np

from ..kernels import Kernels, kernel
from ..problem import Problem

R = 2.0**-0.5  #: radius and depth of the conical orbit
OMEGA = 2.0**0.25  #: angular speed of the conical orbit
PERIOD = 2.0 * np.pi / OMEGA
Q0 = [R, 0.0, -R]
P0 = [0.0, 2.0**-0.25, 0.0]


def conical_exact(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uniform circular motion at height -2^-1/2; lambda = 2^-1/2 (constant)."""
    t = np.asarray(t, dtype=float)
    wt = OMEGA * t
    q = np.stack([R * np.cos(wt), R * np.sin(wt), np.full_like(t, -R)], axis=-1)
    p = np.stack([-R * OMEGA * np.sin(wt), R * OMEGA * np.cos(wt), np.zeros_like(t)], axis=-1)
    lam = np.full((t.size, 1), R)
    return q, p, lam


# Compiled callbacks (hbvm_core.kernels): fill ``out`` at the rows of Q; ``params`` unused. They mirror the
# numpy ones (integer powers as products rather than libm ``pow``), so both paths agree to round-off.
@kernel
def sphere_G_kernel(Q, out, params):
    """g = |q|^2 - 1: G = 2 q."""
    for i in range(Q.shape[0]):
        for a in range(Q.shape[1]):
            out[i, a, 0] = 2.0 * Q[i, a]


@kernel
def sphere_g_kernel(Q, out, params):
    """g = |q|^2 - 1 (for the compiled RATTLE)."""
    for i in range(Q.shape[0]):
        acc = 0.0
        for a in range(Q.shape[1]):
            acc += Q[i, a] * Q[i, a]
        out[i, 0] = acc - 1.0


@kernel
def conical_grad_U_kernel(Q, out, params):
    """U = z."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 0.0
        out[i, 2] = 1.0


@kernel
def modified_grad_U_kernel(Q, out, params):
    """U = z^4."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 0.0
        z = Q[i, 2]
        out[i, 2] = 4.0 * (z * z * z)


@kernel
def modified_G_kernel(Q, out, params):
    """g = x^6 + y^4 + z^2 - 0.625: G = (6 x^5, 4 y^3, 2 z)."""
    for i in range(Q.shape[0]):
        x, y = Q[i, 0], Q[i, 1]
        x2 = x * x
        out[i, 0, 0] = 6.0 * (x2 * x2 * x)
        out[i, 1, 0] = 4.0 * (y * y * y)
        out[i, 2, 0] = 2.0 * Q[i, 2]


@kernel
def modified_g_kernel(Q, out, params):
    """g = x^6 + y^4 + z^2 - 0.625 (for the compiled RATTLE)."""
    for i in range(Q.shape[0]):
        x2, y2, z = Q[i, 0] * Q[i, 0], Q[i, 1] * Q[i, 1], Q[i, 2]
        out[i, 0] = x2 * x2 * x2 + y2 * y2 + z * z - 0.625


def conical_pendulum() -> Problem:
    """U = z, g = |q|^2 - 1 (table2, fig1, fig2)."""
    return Problem(
        name="conical_pendulum",
        kernels=Kernels(
            grad_U=f"{__name__}:conical_grad_U_kernel", G=f"{__name__}:sphere_G_kernel", g=f"{__name__}:sphere_g_kernel"
        ),
        q0=Q0,
        p0=P0,
        U=lambda Q: Q[:, 2].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 0.0, 1.0], Q.shape).copy(),
        g=lambda Q: (np.einsum("nm,nm->n", Q, Q) - 1.0)[:, None],
        G=lambda Q: 2.0 * Q[:, :, None],
        d2g=lambda Q, V: 2.0 * np.einsum("nm,nm->n", V, V)[:, None],
        exact=conical_exact,
        period=PERIOD,
    )


def modified_G(Q: np.ndarray) -> np.ndarray:
    """G(q) of the modified pendulum's g = x^6 + y^4 + z^2 - level (any level)."""
    x, y, z = Q.T
    return np.stack([6 * x**5, 4 * y**3, 2 * z], axis=-1)[:, :, None]


def modified_d2g(Q: np.ndarray, V: np.ndarray) -> np.ndarray:
    """The second derivative of the modified pendulum's g along V (any level)."""
    x, y, _ = Q.T
    return (30 * x**4 * V[:, 0] ** 2 + 12 * y**2 * V[:, 1] ** 2 + 2 * V[:, 2] ** 2)[:, None]


def modified_pendulum() -> Problem:
    """U = z^4, g = x^6 + y^4 + z^2 - 0.625 (table3); no closed form."""

    def g(Q):
        x, y, z = Q.T
        return (x**6 + y**4 + z**2 - 0.625)[:, None]

    def grad_U(Q):
        out = np.zeros_like(Q)
        out[:, 2] = 4 * Q[:, 2] ** 3
        return out

    return Problem(
        name="modified_pendulum",
        kernels=Kernels(
            grad_U=f"{__name__}:modified_grad_U_kernel",
            G=f"{__name__}:modified_G_kernel",
            g=f"{__name__}:modified_g_kernel",
        ),
        q0=Q0,
        p0=P0,
        U=lambda Q: Q[:, 2] ** 4,
        grad_U=grad_U,
        g=g,
        G=modified_G,
        d2g=modified_d2g,
    )
