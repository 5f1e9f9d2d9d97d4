"""User problem factories that are wrong on purpose (the reliability tests).

Written only against the public API, like a user's module: the workflow finds
them as ``bad_problems:<factory>`` when tests/ is on PYTHONPATH. Each is the
planar pendulum (docs/method.md 4.1) with one defect.
"""

from __future__ import annotations

import numpy as np

import hbvm_core as hc


def _pendulum(name: str, **overrides) -> hc.Problem:
    kw = dict(
        name=name,
        q0=[0.0, -1.0],
        p0=[1.0, 0.0],
        U=lambda Q: Q[:, 1].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 1.0], Q.shape).copy(),
        g=lambda Q: (Q[:, 0] ** 2 + Q[:, 1] ** 2 - 1.0)[:, None],
        G=lambda Q: 2.0 * Q[:, :, None],
        d2g=lambda Q, V: 2.0 * np.sum(V**2, axis=1)[:, None],
    )
    kw.update(overrides)
    return hc.Problem(**kw)


def good():
    """The planar pendulum, correct (a control: the same module path works)."""
    return _pendulum("good_pendulum")


def off_constraint():
    """q0 = (0, -1.1): g(q0) = 0.21, not on the circle."""
    return _pendulum("off_constraint", q0=[0.0, -1.1])


def hidden_violated():
    """p0 = (0, 1) points out of the circle: G(q0)^T p0 = -2."""
    return _pendulum("hidden_violated", p0=[0.0, 1.0])


def wrong_shape():
    """grad_U returns (n, 1) instead of (n, m)."""
    return _pendulum("wrong_shape", grad_U=lambda Q: Q[:, :1].copy())


def singular():
    """The same constraint twice in R^3: G^T M^-1 G is singular."""
    return hc.Problem(
        name="singular",
        q0=[0.0, 0.0, -1.0],
        p0=[1.0, 0.0, 0.0],
        U=lambda Q: Q[:, 2].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 0.0, 1.0], Q.shape).copy(),
        g=lambda Q: np.repeat((np.sum(Q**2, 1) - 1.0)[:, None], 2, axis=1),
        G=lambda Q: np.repeat(2.0 * Q[:, :, None], 2, axis=2),
    )


def nan_at_start():
    """U returns NaN everywhere (caught when the problem is built)."""
    return _pendulum("nan_at_start", U=lambda Q: np.full(len(Q), np.nan))


def not_a_problem():
    """Returns a dict, not a Problem."""
    return {"q0": [0.0, -1.0]}


def nan_later(y_max: float = -0.8):
    """grad_U turns NaN once the bob rises above y_max (it reaches y = -1/2): a run fails mid-way."""

    def grad_U(Q):
        out = np.broadcast_to([0.0, 1.0], Q.shape).copy()
        out[Q[:, 1] > y_max] = np.nan
        return out

    return _pendulum("nan_later", grad_U=grad_U)


def raises():
    """A factory whose body fails (a user's bug, not a problem with the params)."""
    raise RuntimeError("the factory broke on purpose")


def type_error_inside(scale=1.0):
    """A TypeError raised inside the factory body: its own bug, not bad params."""
    return _pendulum("type_error_inside", q0=[0.0, -1.0 * scale]) + 1


def bead_on_parabola(sign: float = -1.0):
    """A bead on the parabola y = x^2 under gravity, G = grad g given with ``sign`` (-1: the wrong sign; +1 right).

    g = y - x^2, so G = (-2x, 1); q0 = (1/2, 1/4) on the curve, p0 = (1, 1) tangent to it (G(q0)^T p0 = 0)."""
    return hc.Problem(
        name="bead_on_parabola",
        q0=[0.5, 0.25],
        p0=[1.0, 1.0],
        U=lambda Q: 9.81 * Q[:, 1],
        grad_U=lambda Q: np.stack([np.zeros(len(Q)), np.full(len(Q), 9.81)], axis=1),
        g=lambda Q: (Q[:, 1] - Q[:, 0] ** 2)[:, None],
        G=lambda Q: sign * np.stack([-2.0 * Q[:, 0], np.ones(len(Q))], axis=1)[:, :, None],
        d2g=lambda Q, V: (-2.0 * V[:, 0] ** 2)[:, None],
    )


def g_of_one_point():
    """g written for one point q (not vectorised): g(q) = [q[1] - q[0]^2]."""
    problem = bead_on_parabola(1.0)
    return hc.Problem(
        name="g_of_one_point",
        q0=problem.q0,
        p0=problem.p0,
        U=problem.U,
        grad_U=problem.grad_U,
        g=lambda q: np.array([q[1] - q[0] ** 2]),
        G=problem.G,
    )


def U_of_one_point():
    """U written for one point (not vectorised): U(Q) = 9.81 Q[1] is the second point, not the heights."""
    return _pendulum("U_of_one_point", U=lambda Q: 9.81 * Q[1])
