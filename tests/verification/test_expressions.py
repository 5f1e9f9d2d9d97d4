"""Problems written as expressions give the hand-written problems' trajectories, on both paths and four methods.

The oracle of each comparison is the hand-written problem (published modules, and the double pendulum of
tests/user_problems.py: numpy callbacks derived by hand); the expression form derives grad U, G and d2g by
sympy and generates its own numpy and compiled code, so the two agree to round-off, not bit for bit.
"""

import numpy as np
import pytest
from user_problems import DOUBLE_PENDULUM_FORMULAS, double_pendulum

import hbvm_core as hc
from hbvm_core.methods import method_from_entry
from hbvm_core.problems import pendulum, spherical, tethered

EPS = np.finfo(float).eps

PLANAR = {
    "name": "planar_pendulum",
    "coordinates": ["x", "y"],
    "params": {"theta_dot0": 1.0, "length": 1.0, "gravity": 1.0},
    "potential": "gravity*y",
    "constraints": ["x**2 + y**2 - length**2"],
    "q0": [0, "-length"],
    "p0": ["length*theta_dot0", 0],
}
CONICAL = {
    "name": "conical_pendulum",
    "coordinates": ["x", "y", "z"],
    "potential": "z",
    "constraints": ["x**2 + y**2 + z**2 - 1"],
    "q0": [spherical.R, 0.0, -spherical.R],
    "p0": [0.0, spherical.P0[1], 0.0],
    "period": "2*pi/2**0.25",
    "exact": {
        "q": ["2**-0.5*cos(2**0.25*t)", "2**-0.5*sin(2**0.25*t)", "-2**-0.5"],
        "p": ["-2**-0.25*sin(2**0.25*t)", "2**-0.25*cos(2**0.25*t)", 0],
        "lam": ["2**-0.5"],
    },
}
MODIFIED = {
    "name": "modified_pendulum",
    "coordinates": ["x", "y", "z"],
    "potential": "z**4",
    "constraints": ["x**6 + y**4 + z**2 - 0.625"],
    "q0": list(spherical.Q0),
    "p0": list(spherical.P0),
}
_BODIES = [("x1", "y1", "z1"), ("x2", "y2", "z2"), ("x3", "y3", "z3")]
TETHERED = {
    "name": "tethered_satellites",
    "coordinates": [c for b in _BODIES for c in b],
    "potential": " - ".join(f"1/sqrt({x}**2 + {y}**2 + {z}**2)" for x, y, z in _BODIES).join(["-", ""]),
    "constraints": [
        f"({a[0]} - {b[0]})**2 + ({a[1]} - {b[1]})**2 + ({a[2]} - {b[2]})**2 - 1"
        for a, b in ((_BODIES[0], _BODIES[1]), (_BODIES[1], _BODIES[2]), (_BODIES[2], _BODIES[0]))
    ],
    "q0": tethered.Q0.tolist(),
    "p0": tethered.tethered_satellites().p0.tolist(),
}
DOUBLE = {
    "name": "double_pendulum",
    "coordinates": ["x1", "y1", "x2", "y2"],
    "params": {"m1": 1.0, "m2": 2.0, "a": 0.6, "b": -0.4, "w1": 0.5, "w2": 1.0},
    "mass": ["m1", "m1", "m2", "m2"],
    "potential": "m1*y1 + m2*y2",
    "constraints": ["x1**2 + y1**2 - 1", "(x2 - x1)**2 + (y2 - y1)**2 - 1"],
    "q0": ["sin(a)", "-cos(a)", "sin(a) + sin(b)", "-cos(a) - cos(b)"],
    "p0": [
        "m1*w1*cos(a)",
        "m1*w1*sin(a)",
        "m2*(w1*cos(a) + w2*cos(b))",
        "m2*(w1*sin(a) + w2*sin(b))",
    ],
}
CASES = {
    "planar": (PLANAR, pendulum.planar_pendulum),
    "conical": (CONICAL, spherical.conical_pendulum),
    "modified": (MODIFIED, spherical.modified_pendulum),
    "tethered": (TETHERED, tethered.tethered_satellites),
    "double": (DOUBLE, double_pendulum),
}
METHODS = {
    "hbvm-constant": ({"k": 4, "s": 2}, 40),
    "hbvm-polynomial": ({"k": 4, "s": 2, "multiplier": "polynomial"}, 40),
    "rattle": ({"method": "rattle"}, 40),
    "ida": ({"method": "ida", "rtol": 1e-10}, 20),
}
H = 0.05


def from_mapping(mapping):
    return hc.get_problem(mapping)


@pytest.mark.parametrize("backend", [pytest.param("numba", marks=pytest.mark.slow), "numpy"])  # numba compiles
# IDA takes the compiled multiplier of the expressions' reference module on both backends
@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m == "ida" else m for m in METHODS])
@pytest.mark.parametrize("case", list(CASES))
def test_expressions_match_the_hand_written_problem(case, method, backend):
    mapping, hand = CASES[case]
    ours, theirs = from_mapping(mapping), hand()
    entry, steps = METHODS[method]
    if backend == "numba" and method_from_entry(dict(entry)).compiled_runner(ours) is None:
        assert method == "hbvm-polynomial" and ours.M is not None  # the only combination without a compiled loop
        pytest.skip("the compiled loop of the polynomial multiplier takes M = I only")
    a = hc.integrate(ours, method_from_entry(dict(entry)), H, steps * H, backend=backend)
    # the hand-written double pendulum has numpy callbacks only: the compiled expressions are compared to them
    b = hc.integrate(
        theirs, method_from_entry(dict(entry)), H, steps * H, backend=backend if theirs.kernels else "numpy"
    )
    scale = max(1.0, np.abs(b.y()).max())
    if method == "ida":
        # IDA chooses its own steps: a round-off difference may change one step-size decision, so the two
        # agree to IDA's tolerance (rtol 1e-10), not to round-off
        tol = 100 * 1e-10 * scale
    else:
        # the same method on equal formulas evaluated in another order: round-off (a few ulps per
        # evaluation), carried by each step's nonlinear iteration and accumulated over the steps
        tol = 200 * steps * EPS * scale
    assert a.y().shape == b.y().shape
    assert np.abs(a.y() - b.y()).max() <= tol
    assert np.abs(a.lam - b.lam).max() <= tol * max(1.0, np.abs(b.lam).max())


def _points(ours):
    """q0 and three points near it, and three directions."""
    rng = np.random.default_rng(1)
    Q = ours.q0[None, :] + np.vstack([np.zeros(ours.m), 0.1 * rng.standard_normal((3, ours.m))])
    return Q, rng.standard_normal(Q.shape)


@pytest.mark.parametrize("case", list(CASES))
def test_derivatives_match(case):
    """U, grad U, g, G and d2g against the hand-written ones at q0 and off q0."""
    mapping, hand = CASES[case]
    ours, theirs = from_mapping(mapping), hand()
    Q, V = _points(ours)
    for key, args in (("U", (Q,)), ("grad_U", (Q,)), ("g", (Q,)), ("G", (Q,)), ("d2g", (Q, V))):
        want = np.asarray(getattr(theirs, key)(*args))
        # equal formulas in another order: a few ulps of the terms' size
        assert np.abs(getattr(ours, key)(*args) - want).max() <= 64 * EPS * max(1.0, np.abs(want).max()), key


@pytest.mark.slow  # compiles the reference module
@pytest.mark.parametrize("case", list(CASES))
def test_multiplier_and_reference_rhs_match(case):
    """lambda(q, p) and the reference ODE's right-hand side (compiled) against the hand-written ones."""
    mapping, hand = CASES[case]
    ours, theirs = from_mapping(mapping), hand()
    Q, V = _points(ours)
    P = ours.p0[None, :] + 0.1 * V
    lam = theirs.multiplier(Q, P)
    assert ours.compiled_reference() is not None  # lambda(q, p) runs compiled
    # a (nu x nu) solve of equal data: its condition times round-off
    assert np.abs(ours.multiplier(Q, P) - lam).max() <= 1e3 * EPS * max(1.0, np.abs(lam).max())
    for q, p in zip(Q, P):  # the compiled right-hand side of the reference ODE against the hand-written numpy one
        y = np.concatenate([q, p])
        want = theirs.index_reduced_rhs(0.0, y)
        assert np.abs(ours.index_reduced_rhs(0.0, y) - want).max() <= 1e3 * EPS * max(1.0, np.abs(want).max())


@pytest.mark.slow  # compiles the reference module
def test_exact_period_and_reference_ode_of_the_conical_pendulum():
    """The closed form given as expressions is the published one; the compiled reference ODE reproduces it."""
    ours = from_mapping(CONICAL)
    t = np.linspace(0.0, 10.0, 11)
    for a, b in zip(ours.exact(t), spherical.conical_exact(t)):
        assert np.abs(a - b).max() <= 64 * EPS
    assert ours.period == pytest.approx(spherical.PERIOD, rel=4 * EPS)
    q, p, lam = hc.references.index_reduced_solution(ours, t)
    # DOP853 at rtol = atol = 1e-13 over 10 time units: its tolerance times the number of periods or so
    assert np.abs(q - spherical.conical_exact(t)[0]).max() <= 1e-11
    assert np.abs(lam - spherical.R).max() <= 1e-11


def test_double_pendulum_with_gravity_conserves_and_is_gauss_collocation_for_k_equal_s():
    """The double pendulum as expressions (no hand-written oracle): HBVM(2,2) (U linear, g quadratic) conserves H
    and g to round-off, and HBVM(2,2) is the Gauss collocation method (k = s): equal to
    HBVM(4,2) on this problem, whose U and g have degree <= 2 (both integrals exact)."""
    pb = hc.get_problem(DOUBLE_PENDULUM_FORMULAS)
    a = hc.integrate(pb, hc.HBVM(2, 2), 0.01, 2.0, backend="numpy")
    b = hc.integrate(pb, hc.HBVM(4, 2), 0.01, 2.0, backend="numpy")
    scale_h = max(1.0, np.abs(a.H()).max())
    # round-off per step (200 steps), on the energy's scale (grav m2 l ~ 30)
    assert a.energy_error().max() <= 200 * 200 * EPS * scale_h
    assert np.abs(a.g()).max() <= 200 * 200 * EPS
    assert np.abs(a.y() - b.y()).max() <= 200 * 200 * EPS * max(1.0, np.abs(a.y()).max())


def test_python_functions_are_traced():
    """The Python form: plain functions of q using hbvm_core.sym, and sympy expressions, give the same problem."""
    from hbvm_core import sym

    pb = hc.from_expressions(
        "tethered_satellites",
        TETHERED["coordinates"],
        lambda q: -sum(1 / sym.sqrt(q[3 * b] ** 2 + q[3 * b + 1] ** 2 + q[3 * b + 2] ** 2) for b in range(3)),
        TETHERED["q0"],
        TETHERED["p0"],
        constraints=lambda q: [
            sum((q[3 * i + x] - q[3 * j + x]) ** 2 for x in range(3)) - 1 for i, j in ((0, 1), (1, 2), (2, 0))
        ],
    )
    assert pb.identity == from_mapping(TETHERED).identity  # the same canonical expressions
