"""The built-in problems with their physical parameters as keywords (docs/method.md section 4).

At the published values every factory here returns the published problem of its
module (``pendulum``, ``spherical``, ``tethered``) unchanged: the same callbacks,
the same compiled kernels, so the same fingerprint and the same numbers. Every
problem returned carries its ``family`` (``hbvm_core.problems.family``): the
factory's instances as arrays over runs, and the instance's general form, with
which the published problem runs in one ensemble block with the other instances. A problem
fingerprint covers the source of the modules that define its callbacks and compiled callbacks,
which is why the general kernels, which read their constants from
``Kernels.params``, live in this module and the published modules stay as they are.

planar_pendulum(theta_dot0, length, gravity)
    U = gravity y, g = x^2 + y^2 - length^2, q0 = (0, -length), p0 = (length theta_dot0, 0).
    The amplitude parameter is the initial angular speed theta_dot0 at the bottom; the
    amplitude is theta_max = 2 arcsin(k) with k = theta_dot0 / (2 w0), w0^2 = gravity / length.
    Closed form for any k < 1 (below the separatrix):
    sin(theta/2) = k sn(w0 t | k^2), theta' = 2 k w0 cn(w0 t | k^2).
conical_pendulum(length, gravity)
    U = gravity z, g = |q|^2 - length^2; uniform circular motion at 45 degrees from the
    vertical (radius = depth = length / sqrt 2) with w^2 = gravity / depth;
    lambda = gravity / (sqrt 2 length), period 2 pi / w.
modified_pendulum(gravity, level, x0, v0)
    U = gravity z^4, g = x^6 + y^4 + z^2 - level; q0 = (x0, 0, -sqrt(level - x0^6)) (the point of the
    surface below x0 in the plane y = 0), p0 = (0, v0, 0) (tangent to the surface). The published
    problem: gravity = 1, level = 0.625, x0 = 2^-1/2, v0 = 2^-1/4 (the conical pendulum's initial data).
tethered_satellites(tether, masses)
    M = diag(m1, m1, m1, m2, m2, m2, m3, m3, m3); U = -sum_i m_i / |q_i| (a central field of
    unit strength acting on masses m_i); g_c = |q_i - q_j|^2 - tether^2; the triangle of
    side ``tether`` at height 20; p3 = (m3 v, 0, 0) with v recomputed so that H(q0, p0) = 0.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import ConfigError
from ..kernels import Kernels, kernel
from ..problem import Problem
from . import pendulum, spherical, tethered
from .family import Family, attach, positive


def _positive(name: str, **values: float) -> None:
    for key, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ConfigError(f"{name}: {key} = {value!r}: expected a positive number")


# --------------------------------------------------------------------------- compiled callbacks
@kernel
def planar_grad_U_kernel(Q, out, params):
    """U = gravity y; params[0] = gravity."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = params[0]


@kernel
def conical_grad_U_kernel(Q, out, params):
    """U = gravity z; params[0] = gravity."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 0.0
        out[i, 2] = params[0]


@kernel
def modified_grad_U_kernel(Q, out, params):
    """U = gravity z^4: grad = (0, 0, 4 gravity z^3); params[0] = gravity."""
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = 0.0
        z = Q[i, 2]
        out[i, 2] = params[0] * (4.0 * (z * z * z))


@kernel
def tethered_grad_U_kernel(Q, out, params):
    """U = -sum_i m_i/|q_i|: grad = m_i q_i / |q_i|^3; params[:3] = (m1, m2, m3)."""
    for i in range(Q.shape[0]):
        for b in range(3):
            x, y, z = Q[i, 3 * b], Q[i, 3 * b + 1], Q[i, 3 * b + 2]
            r = math.sqrt(x * x + y * y + z * z)
            c = params[b] / (r * r * r)
            out[i, 3 * b] = c * x
            out[i, 3 * b + 1] = c * y
            out[i, 3 * b + 2] = c * z


@kernel
def circle_g_kernel(Q, out, params):
    """g = |q|^2 - length^2 (planar and conical pendulum, for the compiled RATTLE); params = (gravity, length^2)."""
    for i in range(Q.shape[0]):
        acc = 0.0
        for a in range(Q.shape[1]):
            acc += Q[i, a] * Q[i, a]
        out[i, 0] = acc - params[1]


@kernel
def modified_g_kernel(Q, out, params):
    """g = x^6 + y^4 + z^2 - level (for the compiled RATTLE); params = (gravity, level)."""
    for i in range(Q.shape[0]):
        x2, y2, z = Q[i, 0] * Q[i, 0], Q[i, 1] * Q[i, 1], Q[i, 2]
        out[i, 0] = x2 * x2 * x2 + y2 * y2 + z * z - params[1]


@kernel
def tethered_g_kernel(Q, out, params):
    """g_c = |q_i - q_j|^2 - tether^2 for the pairs (1,2), (2,3), (3,1); params = (m1, m2, m3, tether^2)."""
    for i in range(Q.shape[0]):
        for c in range(3):
            bi, bj = c, (c + 1) % 3
            acc = 0.0
            for x in range(3):
                d = Q[i, 3 * bi + x] - Q[i, 3 * bj + x]
                acc += d * d
            out[i, c] = acc - params[3]


# --------------------------------------------------------------------------- families
def _family(name: str, values: dict, shapes: dict, rows, callbacks: tuple, build, instance: Problem | None):
    """The Family of an instance at ``values`` (``instance``: the general instance itself; None: the published
    problem, whose general form ``build`` makes on first use)."""
    form = (lambda: instance) if instance is not None else functools.cache(lambda: build(**values))
    U, grad_U, g, G, d2g = callbacks
    return Family(name, dict(values), shapes, rows, U, grad_U, g, G, d2g, build, form)


def _column(K, j: int) -> np.ndarray:
    """Column j of the params rows K ([n, P], or one row [P]) as a value per point ([n, 1], or a number)."""
    K = np.asarray(K)
    return K[..., j] if K.ndim == 1 else K[:, j : j + 1]


def _at(K, j: int) -> np.ndarray:
    """Column j of K as a value per point for a sum over the points' axis ([n], or a number)."""
    return np.asarray(K)[..., j]


def _circle_G(Q, K=None):
    return 2.0 * Q[:, :, None]


def _circle_d2g(Q, V, K=None):
    return 2.0 * np.einsum("nm,nm->n", V, V)[:, None]


# --------------------------------------------------------------------------- planar pendulum
def planar_U(Q, K):
    """U = gravity y; K = (gravity, length^2)."""
    return _at(K, 0) * Q[:, 1]


def planar_grad_U(Q, K):
    out = np.zeros_like(Q)
    out[:, 1] = _at(K, 0)
    return out


def planar_g(Q, K):
    return (Q[:, 0] ** 2 + Q[:, 1] ** 2 - _at(K, 1))[:, None]


def planar_rows(v: dict) -> tuple:
    """K, q0, p0, M (None) of planar pendula at the rows of theta_dot0, length, gravity."""
    positive("planar_pendulum", v)
    theta_dot0, length, gravity = v["theta_dot0"], v["length"], v["gravity"]
    w0 = np.sqrt(gravity / length)
    k = theta_dot0 / (2.0 * w0)
    if np.any(k >= 1.0):
        i = int(np.flatnonzero(k >= 1.0)[0])
        raise ConfigError(
            f"planar_pendulum: theta_dot0 = {theta_dot0[i]} (run {i}) reaches the separatrix "
            f"(needs theta_dot0 < 2 sqrt(gravity/length) = {2.0 * w0[i]})"
        )
    zero = np.zeros_like(length)
    K = np.stack([gravity, length * length], axis=1)
    return K, np.stack([zero, -length], axis=1), np.stack([length * theta_dot0, zero], axis=1), None


PLANAR = {"theta_dot0": (), "length": (), "gravity": ()}
PLANAR_CALLBACKS = (planar_U, planar_grad_U, planar_g, _circle_G, _circle_d2g)


def planar_pendulum(theta_dot0: float = 1.0, length: float = 1.0, gravity: float = 1.0) -> Problem:
    """Planar pendulum, m = 2, nu = 1 (table1); the published one at the defaults.

    Parameters
    ----------
    theta_dot0 : float
        Initial angular speed at the bottom (theta(0) = 0); it sets the amplitude
        theta_max = 2 arcsin(theta_dot0 / (2 sqrt(gravity / length))), which must stay below the
        separatrix (theta_dot0 < 2 sqrt(gravity / length)).
    length, gravity : float
        The pendulum's length and the gravity.
    """
    _positive("planar_pendulum", theta_dot0=theta_dot0, length=length, gravity=gravity)
    values = {"theta_dot0": theta_dot0, "length": length, "gravity": gravity}
    if (theta_dot0, length, gravity) == (1.0, 1.0, 1.0):
        family = _family("planar_pendulum", values, PLANAR, planar_rows, PLANAR_CALLBACKS, _planar, None)
        return attach(pendulum.planar_pendulum(), family)
    return _planar(theta_dot0, length, gravity)


def _planar(theta_dot0: float, length: float, gravity: float) -> Problem:
    """The planar pendulum with the general callbacks."""
    w0 = math.sqrt(gravity / length)
    k = theta_dot0 / (2.0 * w0)
    if k >= 1.0:
        raise ConfigError(
            f"planar_pendulum: theta_dot0 = {theta_dot0} reaches the separatrix "
            f"(needs theta_dot0 < 2 sqrt(gravity/length) = {2.0 * w0})"
        )
    L2 = length * length
    K = np.array([gravity, L2])

    def exact(t):
        from scipy.special import ellipj  # on first use (pendulum.theta_exact)

        sn, cn, _, _ = ellipj(w0 * np.asarray(t, dtype=float), k * k)
        th, om = 2.0 * np.arcsin(k * sn), 2.0 * k * w0 * cn
        q = length * np.stack([np.sin(th), -np.cos(th)], axis=-1)
        p = length * np.stack([np.cos(th) * om, np.sin(th) * om], axis=-1)
        return q, p, (0.5 * (om**2 + w0 * w0 * np.cos(th)))[:, None]

    values = {"theta_dot0": theta_dot0, "length": length, "gravity": gravity}
    pb = Problem(
        name="planar_pendulum",
        kernels=Kernels(
            grad_U=f"{__name__}:planar_grad_U_kernel",
            G=f"{pendulum.__name__}:planar_G_kernel",
            g=f"{__name__}:circle_g_kernel",
            params=(gravity, L2),
        ),
        q0=[0.0, -length],
        p0=[length * theta_dot0, 0.0],
        U=lambda Q: planar_U(Q, K),
        grad_U=lambda Q: planar_grad_U(Q, K),
        g=lambda Q: planar_g(Q, K),
        G=_circle_G,
        d2g=_circle_d2g,
        exact=exact,
        params=values,
    )
    return attach(pb, _family("planar_pendulum", values, PLANAR, planar_rows, PLANAR_CALLBACKS, _planar, pb))


# --------------------------------------------------------------------------- conical pendulum
def conical_U(Q, K):
    """U = gravity z; K = (gravity, length^2)."""
    return _at(K, 0) * Q[:, 2]


def conical_grad_U(Q, K):
    out = np.zeros_like(Q)
    out[:, 2] = _at(K, 0)
    return out


def conical_g(Q, K):
    return (np.einsum("nm,nm->n", Q, Q) - _at(K, 1))[:, None]


def conical_rows(v: dict) -> tuple:
    """K, q0, p0, M (None) of conical pendula at the rows of length, gravity."""
    positive("conical_pendulum", v)
    length, gravity = v["length"], v["gravity"]
    r = length * 2.0**-0.5
    w = np.sqrt(gravity / r)
    zero = np.zeros_like(r)
    K = np.stack([gravity, length * length], axis=1)
    return K, np.stack([r, zero, -r], axis=1), np.stack([zero, r * w, zero], axis=1), None


CONICAL = {"length": (), "gravity": ()}
CONICAL_CALLBACKS = (conical_U, conical_grad_U, conical_g, _circle_G, _circle_d2g)


def conical_pendulum(length: float = 1.0, gravity: float = 1.0) -> Problem:
    """U = gravity z, g = |q|^2 - length^2 (table2, fig1, fig2); the published one at the defaults."""
    _positive("conical_pendulum", length=length, gravity=gravity)
    if (length, gravity) == (1.0, 1.0):
        values = {"length": length, "gravity": gravity}
        family = _family("conical_pendulum", values, CONICAL, conical_rows, CONICAL_CALLBACKS, _conical, None)
        return attach(spherical.conical_pendulum(), family)
    return _conical(length, gravity)


def _conical(length: float, gravity: float) -> Problem:
    """The conical pendulum with the general callbacks."""
    r = length * 2.0**-0.5  # radius = depth of the orbit
    w = math.sqrt(gravity / r)
    lam = gravity * r / (length * length)
    L2 = length * length
    K = np.array([gravity, L2])

    def exact(t):
        t = np.asarray(t, dtype=float)
        wt = w * t
        q = np.stack([r * np.cos(wt), r * np.sin(wt), np.full_like(t, -r)], axis=-1)
        p = np.stack([-r * w * np.sin(wt), r * w * np.cos(wt), np.zeros_like(t)], axis=-1)
        return q, p, np.full((t.size, 1), lam)

    values = {"length": length, "gravity": gravity}
    pb = Problem(
        name="conical_pendulum",
        kernels=Kernels(
            grad_U=f"{__name__}:conical_grad_U_kernel",
            G=f"{spherical.__name__}:sphere_G_kernel",
            g=f"{__name__}:circle_g_kernel",
            params=(gravity, L2),
        ),
        q0=[r, 0.0, -r],
        p0=[0.0, r * w, 0.0],
        U=lambda Q: conical_U(Q, K),
        grad_U=lambda Q: conical_grad_U(Q, K),
        g=lambda Q: conical_g(Q, K),
        G=_circle_G,
        d2g=_circle_d2g,
        exact=exact,
        period=2.0 * np.pi / w,
        params=values,
    )
    return attach(pb, _family("conical_pendulum", values, CONICAL, conical_rows, CONICAL_CALLBACKS, _conical, pb))


# --------------------------------------------------------------------------- modified pendulum
#: the published modified pendulum's parameters (docs/method.md 4.3)
MODIFIED_DEFAULTS = {"gravity": 1.0, "level": 0.625, "x0": spherical.R, "v0": spherical.P0[1]}


def modified_U(Q, K):
    """U = gravity z^4; K = (gravity, level)."""
    return _at(K, 0) * Q[:, 2] ** 4


def modified_grad_U(Q, K):
    out = np.zeros_like(Q)
    out[:, 2] = _at(K, 0) * (4 * Q[:, 2] ** 3)
    return out


def modified_g(Q, K):
    x, y, z = Q.T
    return (x**6 + y**4 + z**2 - _at(K, 1))[:, None]


def _modified_G(Q, K=None):
    return spherical.modified_G(Q)


def _modified_d2g(Q, V, K=None):
    return spherical.modified_d2g(Q, V)


def modified_rows(v: dict) -> tuple:
    """K, q0, p0, M (None) of modified pendula at the rows of gravity, level, x0, v0."""
    positive("modified_pendulum", {key: v[key] for key in ("gravity", "level")})
    gravity, level, x0, v0 = v["gravity"], v["level"], v["x0"], v["v0"]
    for key, arr in (("x0", x0), ("v0", v0)):
        if not np.all(np.isfinite(arr)):
            i = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise ConfigError(f"modified_pendulum: {key} = {arr[i]!r} (run {i}): expected a finite number")
    off = x0**6 > level
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise ConfigError(
            f"modified_pendulum: x0 = {x0[i]} (run {i}) is off the surface (needs x0^6 <= level = {level[i]}, "
            f"|x0| <= {level[i] ** (1 / 6)})"
        )
    same_point = (level == MODIFIED_DEFAULTS["level"]) & (x0 == MODIFIED_DEFAULTS["x0"])
    with np.errstate(invalid="ignore"):
        z0 = np.where(same_point, spherical.Q0[2], -np.sqrt(level - x0**6))
    zero = np.zeros_like(x0)
    K = np.stack([gravity, level], axis=1)
    return K, np.stack([x0, zero, z0], axis=1), np.stack([zero, v0, zero], axis=1), None


MODIFIED = {"gravity": (), "level": (), "x0": (), "v0": ()}
MODIFIED_CALLBACKS = (modified_U, modified_grad_U, modified_g, _modified_G, _modified_d2g)


def modified_pendulum(
    gravity: float = 1.0, level: float = 0.625, x0: float = spherical.R, v0: float = spherical.P0[1]
) -> Problem:
    """U = gravity z^4, g = x^6 + y^4 + z^2 - level (table3); no closed form; the published one at the defaults.

    Parameters
    ----------
    gravity : float
        The strength of the potential U = gravity z^4.
    level : float
        The level of the constraint surface x^6 + y^4 + z^2 = level (its size, as the length of a pendulum).
    x0 : float
        The initial distance from the axis: q0 = (x0, 0, -sqrt(level - x0^6)), on the surface below the
        equator (x0^6 <= level); the amplitude of the motion.
    v0 : float
        The initial velocity p0 = (0, v0, 0), tangent to the surface.
    """
    _positive("modified_pendulum", gravity=gravity, level=level)
    for key, value in (("x0", x0), ("v0", v0)):
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise ConfigError(f"modified_pendulum: {key} = {value!r}: expected a finite number")
    if x0**6 > level:
        raise ConfigError(
            f"modified_pendulum: x0 = {x0} is off the surface (needs x0^6 <= level = {level}, "
            f"|x0| <= {level ** (1 / 6)})"
        )
    if (gravity, level, x0, v0) == tuple(MODIFIED_DEFAULTS.values()):
        family = _family(
            "modified_pendulum", MODIFIED_DEFAULTS, MODIFIED, modified_rows, MODIFIED_CALLBACKS, _build_modified, None
        )
        return attach(spherical.modified_pendulum(), family)
    return _modified_pendulum(float(gravity), float(level), float(x0), float(v0))


def _build_modified(gravity: float, level: float, x0: float, v0: float) -> Problem:
    return _modified_pendulum(float(gravity), float(level), float(x0), float(v0))


def _modified_pendulum(gravity: float, level: float, x0: float, v0: float) -> Problem:
    """The modified pendulum with these parameters built with the general callbacks (at the published values
    it computes the published problem's numbers, to round-off, under another fingerprint)."""
    # the published initial point where x0 and level are the published ones (no round-off in the sqrt)
    same_point = (level, x0) == (MODIFIED_DEFAULTS["level"], MODIFIED_DEFAULTS["x0"])
    z0 = spherical.Q0[2] if same_point else -math.sqrt(level - x0**6)
    K = np.array([gravity, level])
    values = {"gravity": gravity, "level": level, "x0": x0, "v0": v0}
    pb = Problem(
        name="modified_pendulum",
        kernels=Kernels(
            grad_U=f"{__name__}:modified_grad_U_kernel",
            G=f"{spherical.__name__}:modified_G_kernel",
            g=f"{__name__}:modified_g_kernel",
            params=(gravity, level),
        ),
        q0=[x0, 0.0, z0],
        p0=[0.0, v0, 0.0],
        U=lambda Q: modified_U(Q, K),
        grad_U=lambda Q: modified_grad_U(Q, K),
        g=lambda Q: modified_g(Q, K),
        G=spherical.modified_G,
        d2g=spherical.modified_d2g,
        params=values,
    )
    family = _family("modified_pendulum", values, MODIFIED, modified_rows, MODIFIED_CALLBACKS, _build_modified, pb)
    return attach(pb, family)


# --------------------------------------------------------------------------- tethered satellites
def tethered_U(Q, K):
    """U = -sum_i m_i / |q_i|; K = (m1, m2, m3, tether^2)."""
    return -np.sum(np.asarray(K)[..., :3] / np.linalg.norm(tethered._bodies(Q), axis=2), axis=1)


def tethered_grad_U(Q, K):
    B = tethered._bodies(Q)
    rr = np.linalg.norm(B, axis=2, keepdims=True)
    return (np.asarray(K)[..., :3, None] * B / rr**3).reshape(Q.shape)


def tethered_g(Q, K):
    return tethered.g(Q) + 1.0 - _column(K, 3)


def _tethered_G(Q, K=None):
    return tethered.G(Q)


def _tethered_d2g(Q, V, K=None):
    return tethered.d2g(Q, V)


def tethered_rows(v: dict) -> tuple:
    """K, q0, p0 and the diagonal of M of tethered satellites at the rows of tether [R] and masses [R, 3]."""
    tether, m = v["tether"], v["masses"]
    positive("tethered_satellites", {"tether": tether, "masses": m})
    R = tether.shape[0]
    q0 = np.zeros((R, 9))
    q0[:, 1], q0[:, 2], q0[:, 4], q0[:, 5] = 0.5 * tether, 20.0, -0.5 * tether, 20.0
    q0[:, 8] = 20.0 - np.sqrt(3.0) / 2.0 * tether
    r = np.linalg.norm(q0.reshape(R, 3, 3), axis=2)
    p0 = np.zeros((R, 9))
    p0[:, 6] = m[:, 2] * np.sqrt(2.0 * np.sum(m / r, axis=1) / m[:, 2])  # H(q0, p0) = 0
    K = np.concatenate([m, (tether * tether)[:, None]], axis=1)
    return K, q0, p0, np.repeat(m, 3, axis=1)


TETHERED = {"tether": (), "masses": (3,)}
TETHERED_CALLBACKS = (tethered_U, tethered_grad_U, tethered_g, _tethered_G, _tethered_d2g)


def tethered_satellites(tether: float = 1.0, masses=(1.0, 1.0, 1.0)) -> Problem:
    """m = 9, nu = 3 (table4, fig3); no closed form; the published one at the defaults.

    Parameters
    ----------
    tether : float
        The length of the three tethers.
    masses : sequence of 3 floats
        m1, m2, m3: M = diag(m1 I3, m2 I3, m3 I3) and U = -sum_i m_i / |q_i|.
    """
    masses = tuple(float(x) for x in np.broadcast_to(np.asarray(masses, dtype=float), (3,)))
    _positive("tethered_satellites", tether=tether, **{f"m{i + 1}": x for i, x in enumerate(masses)})
    if tether == 1.0 and masses == (1.0, 1.0, 1.0):
        values = {"tether": tether, "masses": list(masses)}
        family = _family("tethered_satellites", values, TETHERED, tethered_rows, TETHERED_CALLBACKS, _tethered, None)
        return attach(tethered.tethered_satellites(), family)
    return _tethered(tether, masses)


def _tethered(tether: float, masses) -> Problem:
    """Tethered satellites with the general callbacks."""
    masses = tuple(float(x) for x in np.broadcast_to(np.asarray(masses, dtype=float), (3,)))
    m = np.asarray(masses)
    q0 = np.array([0.0, 0.5 * tether, 20.0, 0.0, -0.5 * tether, 20.0, 0.0, 0.0, 20.0 - np.sqrt(3.0) / 2.0 * tether])
    r = np.linalg.norm(q0.reshape(3, 3), axis=1)
    v = float(np.sqrt(2.0 * np.sum(m / r) / m[2]))  # H(q0, p0) = m3 v^2 / 2 - sum_i m_i/|q_i| = 0
    p0 = np.zeros(9)
    p0[6] = m[2] * v
    T2 = tether * tether
    K = np.array([*masses, T2])
    values = {"tether": tether, "masses": list(masses)}
    pb = Problem(
        name="tethered_satellites",
        q0=q0,
        p0=p0,
        U=lambda Q: tethered_U(Q, K),
        grad_U=lambda Q: tethered_grad_U(Q, K),
        g=lambda Q: tethered_g(Q, K),
        G=tethered.G,
        d2g=tethered.d2g,
        M=np.repeat(m, 3),
        kernels=Kernels(
            grad_U=f"{__name__}:tethered_grad_U_kernel",
            G=f"{tethered.__name__}:G_kernel",
            g=f"{__name__}:tethered_g_kernel",
            params=(*masses, T2),
        ),
        params=values,
    )
    family = _family("tethered_satellites", values, TETHERED, tethered_rows, TETHERED_CALLBACKS, _tethered, pb)
    return attach(pb, family)
