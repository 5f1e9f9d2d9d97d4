"""User-defined problems written only against the public API (used by tests and as examples)."""

from __future__ import annotations

import functools
import os

import numpy as np

import hbvm_core as hc

#: Another host's round-off, simulated: a problem built by ``perturbed`` while this variable holds an integer u
#: has its callbacks' values and p0 multiplied by (1 + u * 2**-52), u units in the last place, as another
#: BLAS or libm would compute them (q0 stays on the constraint). Read when the problem is built (in the process
#: that builds it: a worker).
PERTURB_ULPS = "HBVM_TEST_PERTURB_ULPS"

#: The pendulum of length ``length`` as a problem given only as expressions (a study's ``problem:`` mapping).
PENDULUM_EXPRESSIONS = {
    "name": "pendulum",
    "coordinates": ["x", "y"],
    "params": {"length": 1.0, "grav": 1.0},
    "potential": "grav*y",
    "constraints": ["x**2 + y**2 - length**2"],
    "q0": [0, "-length"],
    "p0": ["length", 0],
}

#: The double pendulum of docs/problems.md as expressions: M = diag(m1, m1, m2, m2), not the identity; l1 in q0 and
#: g, m2 and grav in U, m2 in M (``double_pendulum`` below is the same problem with numpy callbacks written by hand)
DOUBLE_PENDULUM_FORMULAS = {
    "name": "double_pendulum",
    "coordinates": ["x1", "y1", "x2", "y2"],
    "params": {"m1": 1.0, "m2": 2.0, "l1": 1.0, "l2": 0.7, "grav": 9.81},
    "mass": ["m1", "m1", "m2", "m2"],
    "potential": "grav*(m1*y1 + m2*y2)",
    "constraints": ["x1**2 + y1**2 - l1**2", "(x2 - x1)**2 + (y2 - y1)**2 - l2**2"],
    "q0": ["l1", 0, "l1 + l2", 0],
    "p0": [0, 0, 0, 0],
}

#: Two masses on rods in space as expressions (m = 6, nu = 3: a 3 x 3 multiplier system; M = diag(m1 x3, m2 x3),
#: not the identity): m1 on a rod of length l1 from the origin, m2 on a rod l2 from m1, held in the plane y = 0. q0
#: has both rods along x and p0 is tangent to every constraint for any l1, so a sweep over l1 has consistent
#: initial data everywhere (a researcher's sweep: ``benchmarks.researcher_sweep`` runs the same problem).
RODS_IN_SPACE = {
    "name": "rods_in_space",
    "coordinates": ["x1", "y1", "z1", "x2", "y2", "z2"],
    "params": {"m1": 1.0, "m2": 2.0, "l1": 1.0, "l2": 0.7, "grav": 9.81},
    "mass": ["m1", "m1", "m1", "m2", "m2", "m2"],
    "potential": "grav*(m1*z1 + m2*z2)",
    "constraints": ["x1**2 + y1**2 + z1**2 - l1**2", "(x2 - x1)**2 + (y2 - y1)**2 + (z2 - z1)**2 - l2**2", "y2"],
    "q0": ["l1", 0, 0, "l1 + l2", 0, 0],
    "p0": [0, "0.5*m1", 0, 0, 0, "0.3*m2"],
}


def double_pendulum(
    m1: float = 1.0, m2: float = 2.0, a: float = 0.6, b: float = -0.4, w1: float = 0.5, w2: float = 1.0
):
    """Two bobs on rigid unit rods in Cartesian coordinates, masses m1, m2 (M = diag(m1, m1, m2, m2)).

    q = (x1, y1, x2, y2); U = m1 y1 + m2 y2; g = (|r1|^2 - 1, |r2 - r1|^2 - 1).
    """
    r1 = np.array([np.sin(a), -np.cos(a)])
    r2 = r1 + np.array([np.sin(b), -np.cos(b)])
    v1 = w1 * np.array([np.cos(a), np.sin(a)])
    v2 = v1 + w2 * np.array([np.cos(b), np.sin(b)])
    mass = np.array([m1, m1, m2, m2])

    def g(Q):
        d = Q[:, 2:] - Q[:, :2]
        return np.stack([np.sum(Q[:, :2] ** 2, 1) - 1, np.sum(d**2, 1) - 1], axis=1)

    def G(Q):
        d = Q[:, 2:] - Q[:, :2]
        out = np.zeros((Q.shape[0], 4, 2))
        out[:, :2, 0] = 2 * Q[:, :2]
        out[:, :2, 1] = -2 * d
        out[:, 2:, 1] = 2 * d
        return out

    def d2g(Q, V):
        dv = V[:, 2:] - V[:, :2]
        return np.stack([2 * np.sum(V[:, :2] ** 2, 1), 2 * np.sum(dv**2, 1)], axis=1)

    return hc.Problem(
        name="double_pendulum",
        q0=np.concatenate([r1, r2]),
        p0=mass * np.concatenate([v1, v2]),
        M=np.diag(mass),
        U=lambda Q: m1 * Q[:, 1] + m2 * Q[:, 3],
        grad_U=lambda Q: np.broadcast_to([0.0, m1, 0.0, m2], Q.shape).copy(),
        g=g,
        G=G,
        d2g=d2g,
        params={"m1": m1, "m2": m2, "a": a, "b": b, "w1": w1, "w2": w2},
    )


def bead_on_torus(R: float = 2.0, r: float = 0.5):
    """A particle on the torus (sqrt(x^2+y^2) - R)^2 + z^2 = r^2 in the potential U = z + x y / 10.

    The constraint is written polynomially: g = (|q|^2 + R^2 - r^2)^2 - 4 R^2 (x^2 + y^2).
    """

    def g(Q):
        x, y, z = Q.T
        s = x**2 + y**2 + z**2 + R**2 - r**2
        return (s**2 - 4 * R**2 * (x**2 + y**2))[:, None]

    def G(Q):
        x, y, z = Q.T
        s = x**2 + y**2 + z**2 + R**2 - r**2
        return np.stack([4 * s * x - 8 * R**2 * x, 4 * s * y - 8 * R**2 * y, 4 * s * z], axis=1)[:, :, None]

    def d2g(Q, V):
        s = np.sum(Q**2, 1) + R**2 - r**2
        qv = np.sum(Q * V, 1)
        vv = np.sum(V**2, 1)
        return (8 * qv**2 + 4 * s * vv - 8 * R**2 * (V[:, 0] ** 2 + V[:, 1] ** 2))[:, None]

    q0 = np.array([R + r, 0.0, 0.0])
    p0 = np.array([0.0, 0.4, 0.3])  # tangent: G(q0) is along x
    return hc.Problem(
        name="bead_on_torus",
        q0=q0,
        p0=p0,
        U=lambda Q: Q[:, 2] + Q[:, 0] * Q[:, 1] / 10,
        grad_U=lambda Q: np.stack([Q[:, 1] / 10, Q[:, 0] / 10, np.ones(len(Q))], axis=1),
        g=g,
        G=G,
        d2g=d2g,
    )


def pendulum_without_d2g():
    """The planar pendulum with only U, grad_U, g, G: no d2g, no closed form, no period."""
    return hc.Problem(
        name="pendulum_without_d2g",
        q0=[0.0, -1.0],
        p0=[1.0, 0.0],
        U=lambda Q: Q[:, 1].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 1.0], Q.shape).copy(),
        g=lambda Q: (Q[:, 0] ** 2 + Q[:, 1] ** 2 - 1.0)[:, None],
        G=lambda Q: 2.0 * Q[:, :, None],
    )


def perturbed(problem: hc.Problem) -> hc.Problem:
    """``problem`` with its values moved by ``PERTURB_ULPS`` units in the last place (unchanged without it)."""
    ulps = int(os.environ.get(PERTURB_ULPS) or 0)
    if not ulps:
        return problem
    factor = 1.0 + ulps * 2.0**-52

    def scaled(f):  # the same name as f: the same problem, computed on another host
        return None if f is None else functools.wraps(f)(lambda *args: factor * np.asarray(f(*args)))

    return hc.Problem(
        name=problem.name,
        q0=problem.q0,
        p0=factor * problem.p0,
        U=scaled(problem.U),
        grad_U=scaled(problem.grad_U),
        g=scaled(problem.g),
        G=scaled(problem.G),
        d2g=scaled(problem.d2g),
        M=problem.M,
        period=problem.period,
        params=problem.params,
    )


def sphere_quadratic(n: int = 12, stiffness: float = 1.0):
    """A particle on the unit sphere of R^n in the dense quadratic potential U = stiffness/2 q^T A q.

    A = I + B^T B / n with B_ij = cos(i + 2 j): built, and grad_U = stiffness Q A computed, by BLAS matrix
    products, whose last bits depend on the host. ``perturbed``: another host's round-off on demand.
    """
    i = np.arange(n)
    B = np.cos(i[:, None] + 2.0 * i[None, :])
    A = np.eye(n) + B.T @ B / n
    q0 = np.zeros(n)
    q0[0] = 1.0
    p0 = np.zeros(n)
    p0[1], p0[2] = 0.6, -0.3  # tangent: G(q0) = 2 q0 is along e_0

    def g(Q):
        return (np.sum(Q**2, 1) - 1.0)[:, None]

    return perturbed(
        hc.Problem(
            name="sphere_quadratic",
            q0=q0,
            p0=p0,
            U=lambda Q: 0.5 * stiffness * np.sum((Q @ A) * Q, 1),
            grad_U=lambda Q: stiffness * (Q @ A),
            g=g,
            G=lambda Q: 2.0 * Q[:, :, None],
            d2g=lambda Q, V: 2.0 * np.sum(V**2, 1)[:, None],
            params={"n": n, "stiffness": stiffness},
        )
    )
