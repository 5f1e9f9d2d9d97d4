"""Chains of beads and rigid rods pinned at the origin (``rods``): open, closed into a loop, branched.

chain(n, length, mass, gravity, theta0, omega0)
    n beads in a planar chain hanging from the pin: rod i joins bead i - 1 (the pin for i = 0) to bead i;
    bead i at x_i = sum_{j <= i} length_j (sin theta_j, -cos theta_j), velocity from the rods' angular
    speeds omega_j (consistent: each rod turns rigidly). m = 2 n, nu = n; G^T M^-1 G is tridiagonal.
closed_chain(n, length, mass, gravity, omega0)
    n beads and n + 1 rods of equal length: a regular polygon with one vertex at the pin, turning rigidly
    about it at omega0 (the rod from the last bead back to the pin closes the loop: G^T M^-1 G is cyclic).
branched_tree(depth, length, mass, gravity, spread, omega0)
    a binary tree of 2^depth - 1 beads hanging from the pin, each bead with two children at angles
    +-spread / level, turning rigidly at omega0.

``mass`` and ``length`` are one number or one per bead / rod (M = diag(mass_b, mass_b) != I allowed);
``linear_algebra`` (auto, sparse, dense) overrides the automatic choice of the numpy steppers' path.
The pattern of G (``sparse.SparseG``) is built once per graph and shared by every problem of that graph.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import ConfigError
from ..problem import Problem
from .rods import Rods

Array = np.ndarray


def _per(name: str, value, size: int, positive: bool = True) -> Array:
    """A number or one per bead / rod, as an array of ``size``; ConfigError naming ``name`` otherwise."""
    a = np.asarray(value, dtype=float)
    if a.ndim == 0:
        a = np.full(size, float(a))
    if a.shape != (size,) or not np.all(np.isfinite(a)) or (positive and np.any(a <= 0)):
        what = "positive " if positive else ""
        shown = f"{float(a):g}" if a.ndim == 0 else f"{a.size} values" if a.size > 4 else repr(a.tolist())
        raise ConfigError(f"{name} = {shown}: expected a {what}finite number or {size} of them")
    return a


def _compact(a: Array) -> float | list[float]:
    """A per-bead array for ``params``: one number where all are equal."""
    return float(a[0]) if np.all(a == a[0]) else a.tolist()


def _count(name: str, value: int, least: int) -> int:
    if not (isinstance(value, (int, np.integer)) and value >= least):
        raise ConfigError(f"{name} = {value!r}: expected an integer >= {least}")
    return int(value)


@lru_cache(maxsize=16)
def _structure(kind: str, a: tuple, b: tuple, n: int, linear_algebra: str):
    """The sparse pattern of one rod graph: found once, shared by its problems."""
    return Rods(np.array(a), np.array(b), n, np.ones(len(b)), np.ones(n), 0.0).structure(linear_algebra)


def _problem(name, a, b, n, length, mass, gravity, q0, v0, params, linear_algebra) -> Problem:
    rods = Rods(a, b, n, length, mass, gravity)
    structure = _structure(name, tuple(int(x) for x in a), tuple(int(x) for x in b), n, linear_algebra)
    M = np.repeat(mass, 2)
    return Problem(
        name=name,
        q0=q0,
        p0=M * v0,
        U=rods.U,
        grad_U=rods.grad_U,
        g=rods.g,
        d2g=rods.d2g,
        M=M,
        sparse=structure,
        params=params,
        coordinates=tuple(f"{c}{b}" for b in range(n) for c in "xy"),
    )


def chain(
    n: int = 10,
    length: float = 1.0,
    mass: float = 1.0,
    gravity: float = 1.0,
    theta0: float = 0.5,
    omega0: float = 0.0,
    linear_algebra: str = "auto",
    links: int | None = None,
) -> Problem:
    """A planar chain of n beads and n rods pinned at the origin (m = 2 n, nu = n).

    ``links`` is n by another name, the one a study's ``grid`` uses (``n`` names the step counts there)."""
    if links is not None:
        if n != 10 and n != links:
            raise ConfigError(f"links = {links!r}: n = {n!r} given too; give one of them")
        n = links
    n = _count("n", n, 1)
    length, mass = _per("length", length, n), _per("mass", mass, n)
    theta, omega = _per("theta0", theta0, n, False), _per("omega0", omega0, n, False)
    e = np.stack([np.sin(theta), -np.cos(theta)], 1) * length[:, None]
    de = np.stack([np.cos(theta), np.sin(theta)], 1) * (length * omega)[:, None]
    q0, v0 = np.cumsum(e, axis=0).ravel(), np.cumsum(de, axis=0).ravel()
    params = {"n": n, "length": _compact(length), "mass": _compact(mass), "gravity": float(gravity),
              "theta0": _compact(theta), "omega0": _compact(omega)}  # fmt: skip
    return _problem("chain", np.arange(-1, n - 1), np.arange(n), n, length, mass, gravity, q0, v0, params,
                    linear_algebra)  # fmt: skip


def closed_chain(
    n: int = 8, length: float = 1.0, mass: float = 1.0, gravity: float = 1.0, omega0: float = 0.3,
    linear_algebra: str = "auto",
) -> Problem:  # fmt: skip
    """A closed loop of n beads and n + 1 rods through the pin (m = 2 n, nu = n + 1)."""
    n = _count("n", n, 2)
    length, mass = float(_per("length", length, 1)[0]), _per("mass", mass, n)
    R = length / (2.0 * np.sin(np.pi / (n + 1)))
    phi = 2.0 * np.pi * np.arange(1, n + 1) / (n + 1)
    x = np.stack([R * np.sin(phi), R * np.cos(phi) - R], 1)  # vertex 0 at the pin, the polygon below it
    v = omega0 * np.stack([-x[:, 1], x[:, 0]], 1)  # rigid rotation about the pin
    a, b = np.concatenate([np.arange(-1, n - 1), [-1]]), np.concatenate([np.arange(n), [n - 1]])
    params = {"n": n, "length": length, "mass": _compact(mass), "gravity": float(gravity), "omega0": float(omega0)}
    return _problem("closed_chain", a, b, n, np.full(n + 1, length), mass, gravity, x.ravel(), v.ravel(), params,
                    linear_algebra)  # fmt: skip


def branched_tree(
    depth: int = 3, length: float = 1.0, mass: float = 1.0, gravity: float = 1.0, spread: float = 1.0,
    omega0: float = 0.3, linear_algebra: str = "auto",
) -> Problem:  # fmt: skip
    """A binary tree of 2^depth - 1 beads, one rod from each bead to its parent (the root's to the pin)."""
    depth = _count("depth", depth, 1)
    n = 2**depth - 1
    length, mass = _per("length", length, n), _per("mass", mass, n)
    parent = np.concatenate([[-1], (np.arange(1, n) - 1) // 2])
    level = np.floor(np.log2(np.arange(1, n + 1))).astype(int)
    side = np.where(np.arange(n) % 2 == 1, -1.0, 1.0)
    theta = np.where(level == 0, 0.0, side * spread / np.maximum(level, 1))
    x = np.zeros((n + 1, 2))  # row n: the pin
    for i in range(n):  # parents come first
        x[i] = x[parent[i]] + length[i] * np.array([np.sin(theta[i]), -np.cos(theta[i])])
    x = x[:n]
    v = omega0 * np.stack([-x[:, 1], x[:, 0]], 1)
    params = {"depth": depth, "length": _compact(length), "mass": _compact(mass), "gravity": float(gravity),
              "spread": float(spread), "omega0": float(omega0)}  # fmt: skip
    return _problem("branched_tree", parent, np.arange(n), n, length, mass, gravity, x.ravel(), v.ravel(), params,
                    linear_algebra)  # fmt: skip
