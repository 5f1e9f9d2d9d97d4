"""The planar pendulum in Cartesian coordinates and its unconstrained theta form (docs/method.md 4.1).

U = y, g = x^2 + y^2 - 1, q0 = (0, -1), p0 = (1, 0).  Exact solution:
sin(theta/2) = 1/2 sn(t | 1/4), theta' = cn(t | 1/4), x = sin theta, y = -cos theta.
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels import Kernels, kernel
from ..problem import Problem

#: Elliptic parameter m = k^2 = (E + 1)/2 with E = theta'(0)^2/2 - cos theta(0) = -1/2.
ELLIPTIC_M = 0.25


def theta_exact(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """theta(t) and theta'(t) from Jacobi's sn, cn with parameter 1/4."""
    from scipy.special import ellipj  # here: scipy.special costs 0.1 s to import, and only a reference needs it

    sn, cn, dn, _ = ellipj(np.asarray(t, dtype=float), ELLIPTIC_M)
    kk = np.sqrt(ELLIPTIC_M)
    return 2.0 * np.arcsin(kk * sn), 2.0 * kk * cn


def planar_exact(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact (q, p, lambda) of the planar pendulum at times t."""
    th, om = theta_exact(t)
    q = np.stack([np.sin(th), -np.cos(th)], axis=-1)
    p = np.stack([np.cos(th) * om, np.sin(th) * om], axis=-1)
    lam = (0.5 * (om**2 + np.cos(th)))[:, None]
    return q, p, lam


# Compiled callbacks (hbvm_core.kernels): fill ``out`` at the rows of Q; ``params`` unused. They mirror the
# numpy ones (integer powers as products rather than libm ``pow``), so both paths agree to round-off.
@kernel
def planar_grad_U_kernel(Q, out, params):
    """U = y."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 1.0


@kernel
def planar_G_kernel(Q, out, params):
    """g = x^2 + y^2 - 1: G = 2 q."""
    for i in range(Q.shape[0]):
        for a in range(Q.shape[1]):
            out[i, a, 0] = 2.0 * Q[i, a]


@kernel
def planar_g_kernel(Q, out, params):
    """g = x^2 + y^2 - 1 (for the compiled RATTLE)."""
    for i in range(Q.shape[0]):
        out[i, 0] = Q[i, 0] * Q[i, 0] + Q[i, 1] * Q[i, 1] - 1.0


@kernel
def theta_grad_U_kernel(Q, out, params):
    """U = -cos(theta): grad = sin(theta)."""
    for i in range(Q.shape[0]):
        out[i, 0] = math.sin(Q[i, 0])


def planar_pendulum() -> Problem:
    """Planar pendulum, m = 2, nu = 1 (table1)."""
    return Problem(
        name="planar_pendulum",
        kernels=Kernels(
            grad_U=f"{__name__}:planar_grad_U_kernel", G=f"{__name__}:planar_G_kernel", g=f"{__name__}:planar_g_kernel"
        ),
        q0=[0.0, -1.0],
        p0=[1.0, 0.0],
        U=lambda Q: Q[:, 1].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 1.0], Q.shape).copy(),
        g=lambda Q: (Q[:, 0] ** 2 + Q[:, 1] ** 2 - 1.0)[:, None],
        G=lambda Q: 2.0 * Q[:, :, None],
        d2g=lambda Q, V: 2.0 * np.einsum("nm,nm->n", V, V)[:, None],
        exact=planar_exact,
    )


def theta_pendulum() -> Problem:
    """The same pendulum as the unconstrained problem in theta: U = -cos theta, m = 1, nu = 0."""

    def exact(t):
        th, om = theta_exact(t)
        return th[:, None], om[:, None], np.zeros((len(th), 0))

    return Problem(
        name="theta_pendulum",
        kernels=Kernels(grad_U=f"{__name__}:theta_grad_U_kernel"),
        q0=[0.0],
        p0=[1.0],
        U=lambda Q: -np.cos(Q[:, 0]),
        grad_U=lambda Q: np.sin(Q),
        exact=exact,
    )


def theta_to_planar(theta: np.ndarray, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map (theta, theta') to the Cartesian (q, p) of the planar pendulum."""
    q = np.stack([np.sin(theta), -np.cos(theta)], axis=-1)
    p = np.stack([np.cos(theta) * omega, np.sin(theta) * omega], axis=-1)
    return q, p
