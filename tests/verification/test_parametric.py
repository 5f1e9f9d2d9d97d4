"""The built-in problems' parameters: the published problem at the defaults, closed forms elsewhere."""

import numpy as np
import pytest
from _util import agrees, fitted_order, round_off

import hbvm_core as hc
from hbvm_core.errors import ConfigError
from hbvm_core.fingerprint import problem_fingerprint
from hbvm_core.methods import RATTLE
from hbvm_core.metrics import PUBLISHED, errors
from hbvm_core.problems import spherical
from hbvm_core.problems.parametric import _modified_pendulum

DEFAULTS = {
    "planar_pendulum": {"theta_dot0": 1.0, "length": 1.0, "gravity": 1.0},
    "conical_pendulum": {"length": 1.0, "gravity": 1.0},
    "modified_pendulum": {"gravity": 1.0, "level": 0.625, "x0": 2.0**-0.5, "v0": 2.0**-0.25},
    "tethered_satellites": {"tether": 1.0, "masses": [1.0, 1.0, 1.0]},
}
CHANGED = {
    "planar_pendulum": [{"theta_dot0": 1.5}, {"length": 2.0}, {"gravity": 2.0}],
    "conical_pendulum": [{"length": 2.0}, {"gravity": 2.0}],
    "modified_pendulum": [{"gravity": 2.0}, {"level": 1.0}, {"x0": 0.5}, {"v0": 1.0}],
    "tethered_satellites": [{"tether": 1.5}, {"masses": [1.0, 2.0, 3.0]}],
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_defaults_are_the_published_problem_and_changes_change_the_fingerprint(name):
    published = problem_fingerprint(hc.get_problem(name))
    assert problem_fingerprint(hc.get_problem(name, **DEFAULTS[name])) == published
    prints = {problem_fingerprint(hc.get_problem(name, **kw)) for kw in CHANGED[name]}
    assert published not in prints and len(prints) == len(CHANGED[name])


def test_amplitude_default_reproduces_table1():
    pb = hc.get_problem("planar_pendulum", theta_dot0=1.0)
    e = errors(hc.integrate(pb, hc.HBVM(1, 1), 0.1 * 2.0**-3, 10.0, backend="numpy"), PUBLISHED["table1"])
    for key, published in (("e_s", 4.0181e-04), ("e_lambda", 4.3835e-03), ("e_hc", 3.6633e-05)):
        assert agrees(e[key], published), (key, e[key], published)


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
@pytest.mark.parametrize("theta_dot0", [1.5, 1.9])
@pytest.mark.parametrize("k,s", [(1, 1), (2, 2)])
def test_order_2_at_other_amplitudes(theta_dot0, k, s):
    """Against the closed form (Jacobi sn with parameter (theta_dot0/2)^2): e_s of order 2."""
    pb = hc.get_problem("planar_pendulum", theta_dot0=theta_dot0)
    hs = [0.05, 0.025, 0.0125]
    es = [errors(hc.integrate(pb, hc.HBVM(k, s), h, 10.0, backend="numpy"), PUBLISHED["table1"]) for h in hs]
    assert fitted_order(hs, [e["e_s"] for e in es]) == pytest.approx(2, abs=0.1)
    assert max(e["e_H"] for e in es) < 1e-13


def test_closed_forms_are_consistent_with_the_equations():
    """lambda(q0, p0) from the equations equals the closed form's; H(q0, p0) = 0 for the satellites."""
    for name, kw in [("planar_pendulum", {"theta_dot0": 1.8, "length": 2.0, "gravity": 3.0}),
                     ("conical_pendulum", {"length": 2.0, "gravity": 3.0})]:  # fmt: skip
        pb = hc.get_problem(name, **kw)
        t = np.linspace(0.0, 3.0, 7)
        q, p, lam = pb.exact(t)
        np.testing.assert_allclose(q[0], pb.q0, atol=1e-15)
        np.testing.assert_allclose(p[0], pb.p0, atol=1e-15)
        np.testing.assert_allclose(pb.multiplier(q, p), lam, rtol=1e-12)
        np.testing.assert_allclose(pb.constraint(q), 0.0, atol=1e-13)
        np.testing.assert_allclose(pb.hamiltonian(q, p), pb.hamiltonian(q[:1], p[:1])[0], atol=1e-13)
    pb = hc.get_problem("tethered_satellites", tether=1.5, masses=[1.0, 2.0, 3.0])
    assert abs(pb.hamiltonian(pb.q0[None], pb.p0[None])[0]) < 1e-14


def test_beyond_the_separatrix_is_refused():
    with pytest.raises(ConfigError, match="separatrix"):
        hc.get_problem("planar_pendulum", theta_dot0=2.0)


def _same(a, b) -> bool:
    """The same run to round-off: general and published callbacks are two evaluation orders of the same formulas
    (a rounding of each quantity's scale per step at most)."""
    steps = len(a.lam)
    return all(
        getattr(a, k).shape == getattr(b, k).shape
        and np.abs(getattr(a, k) - getattr(b, k)).max() <= round_off(steps, np.abs(getattr(a, k)).max(), per_step=4)
        for k in ("q", "p", "lam")
    )


@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_modified_pendulum_defaults_reproduce_the_published_run(backend):
    """The factory at its defaults and its general callbacks at the published values compute the published
    problem's numbers (to round-off); each changed parameter changes them."""
    method = hc.HBVM(6, 2)
    old = hc.integrate(spherical.modified_pendulum(), method, 0.1, 3.0, backend=backend)
    assert old.attrs["backend"] == backend
    for pb in (
        hc.get_problem("modified_pendulum"),
        hc.get_problem("modified_pendulum", **DEFAULTS["modified_pendulum"]),
        _modified_pendulum(**DEFAULTS["modified_pendulum"]),
    ):
        assert _same(hc.integrate(pb, method, 0.1, 3.0, backend=backend), old)
    for kw in CHANGED["modified_pendulum"]:
        new = hc.integrate(hc.get_problem("modified_pendulum", **kw), method, 0.1, 3.0, backend=backend)
        assert not np.array_equal(new.q, old.q), kw
        assert np.max(np.abs(new.q - old.q)) > 1e-3, kw  # a change of the motion, not of round-off


@pytest.mark.parametrize("kw", CHANGED["modified_pendulum"] + [{"gravity": 0.5, "level": 2.0, "x0": 1.1, "v0": 0.3}])
def test_modified_pendulum_parameters_enter_the_equations(kw):
    """Consistent initial data on the surface x^6 + y^4 + z^2 = level, and HBVM(3s, s) conserves H and g
    to round-off (U, g polynomials of degree <= 6) at other parameters too."""
    pb = hc.get_problem("modified_pendulum", **kw)
    full = {**DEFAULTS["modified_pendulum"], **kw}
    assert pb.params == full
    assert pb.q0[0] == full["x0"] and pb.q0[1] == 0.0 and pb.q0[2] < 0.0 and pb.p0.tolist() == [0.0, full["v0"], 0.0]
    q = np.array([[0.3, -0.4, 0.5]])
    assert pb.constraint(q)[0, 0] == pytest.approx(0.3**6 + 0.4**4 + 0.5**2 - full["level"], abs=1e-15)
    assert pb.U(q)[0] == pytest.approx(full["gravity"] * 0.5**4, rel=1e-15)
    traj = hc.integrate(pb, hc.HBVM(6, 2), 0.1, 5.0, backend="numpy")
    assert np.max(traj.energy_error()) < 1e-13
    assert np.max(np.abs(traj.g())) < 1e-13


def test_modified_pendulum_off_the_surface_is_refused():
    with pytest.raises(ConfigError, match="off the surface"):
        hc.get_problem("modified_pendulum", x0=1.0)  # x0^6 = 1 > level = 0.625
    with pytest.raises(ConfigError, match="level"):
        hc.get_problem("modified_pendulum", level=-1.0)


@pytest.mark.parametrize(
    "name,kw",
    [
        ("planar_pendulum", {"length": 2.0}),
        ("conical_pendulum", {"length": 2.0}),
        ("modified_pendulum", {"gravity": 0.5, "level": 2.0, "x0": 1.1, "v0": 0.3}),
        ("tethered_satellites", {"tether": 1.5, "masses": [1.0, 2.0, 3.0]}),
    ],
)
@pytest.mark.slow  # compiles loops of its own (tens of seconds on 2 cores)
def test_rattle_runs_compiled_at_any_parameters(name, kw):
    """The parametric problems' compiled g reads the length (the level) from Kernels.params: RATTLE's loop (with
    M != I for the tethered masses) repeats the numpy RATTLE to round-off and keeps g at round-off."""
    problem = hc.get_problem(name, **kw)
    ref = hc.integrate(problem, RATTLE(), 0.05, 2.0, backend="numpy")
    traj = hc.integrate(problem, RATTLE(), 0.05, 2.0)
    assert traj.attrs["backend"] == "numba"
    np.testing.assert_allclose(traj.q, ref.q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(traj.p, ref.p, rtol=0, atol=1e-12)
    assert np.abs(traj.g()).max() <= 1e-13
