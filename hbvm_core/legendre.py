"""Shifted orthonormal Legendre basis and Gauss-Legendre quadrature on [0, 1] (docs/method.md section 2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np
from numpy.polynomial import legendre as npleg


def shifted_legendre(j_max: int, c: np.ndarray) -> np.ndarray:
    """P_j(c) = sqrt(2j+1) L_j(2c-1) for j = 0..j_max; returns shape (len(c), j_max+1)."""
    c = np.asarray(c, dtype=float)
    out = np.empty((c.size, j_max + 1))
    x = 2.0 * c - 1.0
    for j in range(j_max + 1):
        coef = np.zeros(j + 1)
        coef[j] = 1.0
        out[:, j] = np.sqrt(2 * j + 1) * npleg.legval(x, coef)
    return out


def xi(j: int) -> float:
    """xi_j = 1 / (2 sqrt(4 j^2 - 1)), j >= 1."""
    return 1.0 / (2.0 * np.sqrt(4.0 * j * j - 1.0))


def gauss_legendre(k: int) -> tuple[np.ndarray, np.ndarray]:
    """k-point Gauss-Legendre nodes c and weights b on [0, 1]."""
    x, w = npleg.leggauss(k)
    return (x + 1.0) / 2.0, w / 2.0


def integrated_legendre(s: int, c: np.ndarray) -> np.ndarray:
    """Ihat[i, j] = int_0^{c_i} P_j for j < s (docs/method.md section 2)."""
    P = shifted_legendre(s, c)
    Ihat = np.empty((len(c), s))
    Ihat[:, 0] = c
    for j in range(1, s):
        Ihat[:, j] = xi(j + 1) * P[:, j + 1] - xi(j) * P[:, j - 1]
    return Ihat


def x_matrix(s: int) -> np.ndarray:
    """X_s = Phat^T Omega Ihat: tridiagonal, X[0,0] = 1/2, X[j,j-1] = xi_j = -X[j-1,j]."""
    X = np.zeros((s, s))
    X[0, 0] = 0.5
    for j in range(1, s):
        X[j, j - 1] = xi(j)
        X[j - 1, j] = -xi(j)
    return X


@dataclass(frozen=True)
class Tableau:
    """Everything HBVM(k, s) needs from the Legendre/Gauss machinery, computed once.

    c, b: Gauss nodes and weights (k,); Phat (k, s); Ihat (k, s); X (s, s);
    W = Omega Phat (k, s), the weights of the Fourier coefficients psi_j, rho_j;
    E (s, s): extrapolation of the stage polynomial to the next step
    (gamma_next = E @ gamma), used as the warm start.
    """

    k: int
    s: int
    c: np.ndarray = field(repr=False)
    b: np.ndarray = field(repr=False)
    Phat: np.ndarray = field(repr=False)
    Ihat: np.ndarray = field(repr=False)
    X: np.ndarray = field(repr=False)
    W: np.ndarray = field(repr=False)
    E: np.ndarray = field(repr=False)


def _extrapolation_matrix(s: int) -> np.ndarray:
    """E[j, i] = int_0^1 P_j(c) P_i(1 + c) dc (exact with s Gauss points)."""
    c, b = gauss_legendre(s)
    Pj = shifted_legendre(s - 1, c)
    Pi = shifted_legendre(s - 1, 1.0 + c)
    return (Pj * b[:, None]).T @ Pi


@cache
def tableau(k: int, s: int) -> Tableau:
    """The HBVM(k, s) tableau; cached, so every method object shares one copy."""
    from .errors import ConfigError

    if not (isinstance(s, (int, np.integer)) and s >= 1):
        raise ConfigError(f"s = {s!r}: expected an integer >= 1")
    if not (isinstance(k, (int, np.integer)) and k >= s):
        raise ConfigError(f"k = {k!r}: expected an integer k >= s = {s}")
    k, s = int(k), int(s)
    c, b = gauss_legendre(k)
    Phat = shifted_legendre(s - 1, c)
    Ihat = integrated_legendre(s, c)
    arrays = dict(c=c, b=b, Phat=Phat, Ihat=Ihat, X=x_matrix(s), W=b[:, None] * Phat, E=_extrapolation_matrix(s))
    for a in arrays.values():
        a.setflags(write=False)
    return Tableau(k=k, s=s, **arrays)
