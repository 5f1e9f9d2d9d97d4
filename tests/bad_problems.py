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
