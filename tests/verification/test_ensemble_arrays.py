"""Runs given as arrays (``integrate_ensemble(problem, ..., params={...})``) against the runs given as a list of
problems, the factory's instance at its defaults inside such a list, the vectorised check of the initial data, and
the road each run took as ``backend_note`` says it."""

from __future__ import annotations

import numpy as np
import pytest
from user_problems import DOUBLE_PENDULUM_FORMULAS

import hbvm_core as hc
from hbvm_core.ensemble import lockstep_refusal, road
from hbvm_core.errors import ConfigError, ProblemError
from hbvm_core.kernels import lanes
from hbvm_core.kernels.rules import OK
from hbvm_core.methods import RATTLE, PolynomialHBVM
from hbvm_core.problems import spherical
from hbvm_core.problems.family import family_of
from hbvm_core.problems.parametric import conical_pendulum, modified_pendulum, planar_pendulum, tethered_satellites

#: the unit round-off of float64
EPS = np.finfo(float).eps
#: a grid over the length holding the published value 1.0, and gravities
LENGTHS = np.array([0.6, 1.0, 1.3, 1.7, 2.2])
GRAVITIES = np.array([1.0, 1.0, 0.7, 2.0, 1.5])


def assert_close(x, y, steps, what):
    """x equals y to eps times their scale times the steps: the same generated step on the same values (the array
    form and the list form may even take the same compiled path, but no two paths are asserted bit for bit)."""
    assert x.shape == y.shape, what
    scale = max(1.0, float(np.max(np.abs(np.nan_to_num(y)), initial=0.0)))
    assert np.max(np.abs(np.nan_to_num(x) - np.nan_to_num(y)), initial=0.0) <= 8 * EPS * scale * max(steps, 1), what


# --------------------------------------------------------------------------- the family's rows (quick)
FAMILIES = {
    "planar_pendulum": (planar_pendulum, {"theta_dot0": [0.5, 1.0, 1.2], "length": [1.0, 1.0, 2.0]}),
    "conical_pendulum": (conical_pendulum, {"length": [0.6, 1.0, 2.2], "gravity": [1.0, 1.0, 3.0]}),
    "modified_pendulum": (modified_pendulum, {"level": [0.625, 1.0, 2.0], "x0": [2.0**-0.5, 0.5, -0.8]}),
    "tethered_satellites": (
        tethered_satellites, {"tether": [1.0, 1.5, 0.8], "masses": [[1, 1, 1], [1, 2, 3], [2, 1, 1]]}
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_rows_are_the_instances(name):
    """The rows the family computes for R runs at once are the instances the factory builds one by one (their
    own scalar code): params rows, q0, p0, M, and the numpy callbacks at each run's params."""
    factory, values = FAMILIES[name]
    family = family_of(factory())
    arrays = family.broadcast({k: np.asarray(v, dtype=float) for k, v in values.items()}, 3)
    K, q0, p0, mass = family.rows(arrays)
    Q = np.random.default_rng(0).normal(size=(3, q0.shape[1])) + q0
    for r in range(3):
        pb = factory(**{k: v[r] for k, v in values.items()})
        k = np.array(pb.kernels.params, dtype=float) if pb.kernels.params else np.asarray(family.form().kernels.params)
        np.testing.assert_allclose(K[r], k, rtol=2 * EPS)
        np.testing.assert_allclose(q0[r], pb.q0, rtol=4 * EPS, atol=4 * EPS * np.abs(pb.q0).max())
        np.testing.assert_allclose(p0[r], pb.p0, rtol=4 * EPS, atol=4 * EPS * np.abs(pb.p0).max())
        diag = np.ones(pb.m) if pb.M is None else np.diag(pb.M)
        np.testing.assert_array_equal(np.ones(pb.m) if mass is None else mass[r], diag)
        for key in ("U", "grad_U", "g", "G"):
            want = getattr(pb, key)(Q)
            got = getattr(family, key)(Q, np.repeat(K[r : r + 1], 3, axis=0))
            np.testing.assert_allclose(got, want, rtol=8 * EPS, atol=8 * EPS * np.abs(want).max(), err_msg=key)


def test_default_instance_carries_its_general_form():
    """At its defaults a factory returns the published problem (same fingerprint as before); its family's form is
    the general instance with the published values (the same numbers: U, g at a point, by hand)."""
    from hbvm_core.fingerprint import problem_fingerprint

    pb = conical_pendulum(length=1.0)
    assert problem_fingerprint(pb) == problem_fingerprint(spherical.conical_pendulum())
    form = family_of(pb).form()
    assert form is not pb and form.kernels.params == (1.0, 1.0) and family_of(pb).form() is form
    q = np.array([[0.3, -0.4, 0.5]])
    assert form.U(q)[0] == 0.5 and form.g(q)[0, 0] == pytest.approx(0.09 + 0.16 + 0.25 - 1.0, abs=4 * EPS)


# --------------------------------------------------------------------------- bad input (quick: raised before a block)
def test_bad_q0_of_a_large_grid_named_in_one_line():
    """10^4 runs by arrays: one q0 off the sphere |q| = length, one p0 with a radial component; the first bad run
    is named in one line with its |g(q0)| (by hand: ((1 + d)^2 - 1) length^2); a NaN row is left to the loop."""
    R = 10_000
    L = np.linspace(0.5, 2.0, R)
    r = L / np.sqrt(2.0)
    q0 = np.stack([r, np.zeros(R), -r], axis=1)  # the closed form's initial point (docs/method.md 4.2)
    p0 = np.stack([np.zeros(R), r * np.sqrt(1.0 / r), np.zeros(R)], axis=1)
    pb, method = conical_pendulum(), hc.HBVM(2, 2)
    bad_q = q0.copy()
    bad_q[5] = np.nan  # not a constraint violation: the run fails in its loop (status non-finite state)
    bad_q[7321] *= 1.0 + 1e-6
    bad_q[9000] *= 1.0 + 1e-3
    with pytest.raises(ProblemError, match=r"q0 of run 7321 is off the constraints") as err:
        hc.integrate_ensemble(pb, method, 0.01, 10, params={"length": L}, q0=bad_q, p0=p0)
    msg = str(err.value)
    assert "\n" not in msg
    g = float(msg.split("|g(q0)| = ")[1].split()[0])
    assert g == pytest.approx(((1 + 1e-6) ** 2 - 1) * L[7321] ** 2, rel=1e-3)  # printed to 4 digits
    bad_p = p0.copy()
    bad_p[42] += 1e-6 * q0[42]  # along G = 2 q: G^T p = 2e-6 |q|^2 = 2e-6 L^2
    with pytest.raises(ProblemError, match=r"p0 of run 42 is off the hidden constraint") as err:
        hc.integrate_ensemble(pb, method, 0.01, 10, params={"length": L}, q0=q0, p0=bad_p)
    hidden = float(str(err.value).split("p0| = ")[1].split()[0])
    assert "\n" not in str(err.value) and hidden == pytest.approx(2e-6 * L[42] ** 2, rel=1e-3)
    # the list form is checked the same way, and the first bad run of either kind is named
    runs = [conical_pendulum(length=x) for x in L[:20]]
    q, p = q0[:20].copy(), p0[:20].copy()
    q[15] *= 1.0 + 1e-4
    p[10] += 1e-6 * q0[10]
    with pytest.raises(ProblemError, match=r"p0 of run 10 is off"):
        hc.integrate_ensemble(runs, method, 0.01, 10, q0=q, p0=p)


def test_bad_params():
    pb, method = conical_pendulum(length=1.5), hc.HBVM(2, 2)
    cases = (
        ({"lenght": [1.0, 2.0]}, ConfigError, r"'lenght' is not a parameter of conical_pendulum .*did you mean"),
        ({"length": [1.0, -2.0]}, ConfigError, r"length = -2.0 \(run 1\): expected a positive number"),
        ({"length": [[1.0, 2.0]]}, ConfigError, r"params\['length'\]: expected a number or an array \[R\]"),
        ({"length": [1.0, 2.0, 3.0]}, ConfigError, r"params\['length'\] has 3 runs, N has 2"),
    )
    for params, kind, match in cases:
        with pytest.raises(kind, match=match) as err:
            hc.integrate_ensemble(pb, method, 0.1, [10, 20], params=params)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="give one Problem"):
        hc.integrate_ensemble([pb, pb], method, 0.1, 10, params={"length": [1.0, 2.0]})
    user = hc.Problem(name="user", q0=pb.q0, p0=pb.p0, U=pb.U, grad_U=pb.grad_U, g=pb.g, G=pb.G, kernels=pb.kernels)
    with pytest.raises(ConfigError, match="user was not built by a parametric factory"):
        hc.integrate_ensemble(user, method, 0.1, 10, params={"length": [1.0, 2.0]})
    with pytest.raises(ConfigError, match=r"separatrix"):  # the factory's own rule, per run
        hc.integrate_ensemble(planar_pendulum(), method, 0.1, 10, params={"theta_dot0": [1.0, 2.5]})


# --------------------------------------------------------------------------- the road (quick: no block runs)
def test_lockstep_refusal_names_the_reason_lanes_applies_checks():
    """None exactly where ``lanes.applies`` (the chooser) says yes; otherwise the condition that fails."""
    conical, tethered = conical_pendulum(length=1.5), tethered_satellites(masses=(1.0, 2.0, 3.0))
    cases = [
        (conical, hc.HBVM(2, 2), None),
        (conical, hc.HBVM(2, 2, solver="blended"), None),  # the blended solver's own lockstep form
        (conical, hc.HBVM(6, 6, solver="blended"), "the blended solver's s m + nu = 19, above lockstep's 16"),
        (conical, PolynomialHBVM(3, 2), None),  # its own lockstep form (kernels/polynomial_lanes.py)
        (conical, PolynomialHBVM(24, 8), "k s m (nu + 1) = 1152, above lockstep's 1024"),
        (conical, RATTLE(), None),  # RATTLE's own lockstep form (kernels/rattle_lanes.py)
        (tethered, hc.HBVM(2, 2), None),  # M != I: each lane its own
        (conical, hc.HBVM(24, 8), "k s m (nu + 1) = 1152, above lockstep's 1024"),
    ]
    for pb, method, reason in cases:
        runner = method.compiled_runner(pb)
        why = lockstep_refusal(runner, pb.m, pb.nu, method)
        assert (why is None) == lanes.applies(runner, pb.m, pb.nu), (method, why)
        assert why == reason if reason is None else why.startswith(reason), why


def test_road_counts_the_runs_and_blocks_of_each_road():
    """19 runs in lockstep (16 of one params row: one block; 3 of other rows: one block of a params row per lane),
    then the same with 5 runs left to the per-run block, and M != I named (counted by hand)."""
    params = np.array([[1.0, 1.0]] * 16 + [[1.0, 2.0], [1.0, 3.0], [1.0, 4.0]])
    note = road(params, [np.arange(19)], None)
    assert note == "lockstep: 19 of 19 runs, blocks of 16 lanes (1 of one params row; 1 of a params row per lane)"
    L = np.zeros((19, 2, 2))
    L[:, 0, 0] = L[:, 1, 1] = 2.0
    note = road(params, [np.arange(14)], None, L)
    assert note == (
        "lockstep: 14 of 19 runs, blocks of 16 lanes (1 of one params row; M != I per lane, diagonal); "
        f"per-run block: 5 of 19 runs (fewer than {lanes.MIN_GROUP} runs)"
    )
    L[3, 1, 0] = 0.5
    assert "M != I per lane, full" in road(params, [np.arange(19)], None, L)
    assert road(params, [], "the blended solver: x") == "per-run block: 19 of 19 runs (the blended solver: x)"


# --------------------------------------------------------------------------- against the list form (slow: blocks)
@pytest.mark.slow
@pytest.mark.parametrize("solver", ["fixed-point", "blended"])
def test_arrays_agree_with_the_list_of_problems(solver):
    """The conical pendulum over length and gravity (the published values among them) by arrays and by a list of
    instances: the same saved points, multipliers, iterations and summary to eps x scale x steps."""
    method, h, N = hc.HBVM(2, 2, solver=solver), 0.05, 40
    runs = [conical_pendulum(length=L, gravity=g) for L, g in zip(LENGTHS, GRAVITIES)]
    listed = hc.integrate_ensemble(runs, method, h, N, sample_every=8)
    arrays = hc.integrate_ensemble(
        conical_pendulum(), method, h, N, params={"length": LENGTHS, "gravity": GRAVITIES}, sample_every=8
    )
    assert np.all(arrays.status == OK) and np.all(listed.status == OK)
    for key in ("n_saved", "steps"):
        np.testing.assert_array_equal(getattr(arrays, key), getattr(listed, key))
    assert np.max(np.abs(arrays.iterations - listed.iterations)) <= N  # a stall test may flip by one sweep a step
    for key in ("t", "q", "p", "lam", "H_error", "g_error"):
        assert_close(getattr(arrays, key), getattr(listed, key), N, key)
    why = f"fewer than {lanes.MIN_GROUP} runs"  # either solver has a lockstep form: too few runs for a block
    assert arrays.backend_note == listed.backend_note and why in arrays.backend_note


@pytest.mark.slow
def test_arrays_with_a_mass_matrix_per_run():
    """Tethered satellites over the masses ([R, 3]: M = diag per run) and the tether, the published problem (M = I)
    among them: arrays against the list."""
    method, h, N = hc.HBVM(6, 2), 0.1, 12
    masses = np.array([[1.0, 2.0, 1.5], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0]])
    tether = np.array([1.0, 1.2, 1.0])
    runs = [tethered_satellites(tether=t, masses=m) for t, m in zip(tether, masses)]
    listed = hc.integrate_ensemble(runs, method, h, N, sample_every=4, threads=1)
    arrays = hc.integrate_ensemble(
        tethered_satellites(), method, h, N, params={"masses": masses, "tether": tether}, sample_every=4, threads=1
    )
    assert np.all(arrays.status == OK) and "fewer than" in arrays.backend_note  # three runs: the per-run block
    for key in ("q", "p", "lam", "H_error", "g_error"):
        assert_close(getattr(arrays, key), getattr(listed, key), N, key)


@pytest.mark.slow
def test_a_list_with_the_default_instance_is_one_block():
    """conical_pendulum(length=1.0) (the published problem) among other lengths is accepted, and its run is the
    published problem's own run (its closed-form callbacks, run alone) to eps x scale x steps."""
    method, h, N = hc.HBVM(2, 2), 0.05, 60
    runs = [conical_pendulum(length=L) for L in (0.8, 1.0, 1.3)]
    block = hc.integrate_ensemble(runs, method, h, N, sample_every=10)
    alone = hc.integrate_ensemble(spherical.conical_pendulum(), method, h, N, sample_every=10)
    assert np.all(block.status == OK) and block.n_saved[1] == alone.n_saved[0]
    for key in ("t", "q", "p", "lam"):
        assert_close(getattr(block, key)[1], getattr(alone, key)[0], N, key)
    assert abs(block.H_error[1] - alone.H_error[0]) <= 8 * EPS * N


@pytest.mark.slow
def test_backend_note_names_lockstep_and_the_rest():
    """16 runs of one length fill a lockstep block of one params row, 3 of other lengths a block of a params row
    per lane; the note counts both."""
    L = np.r_[np.full(16, 1.5), 1.6, 1.7, 1.8]
    res = hc.integrate_ensemble(conical_pendulum(), hc.HBVM(2, 2), 0.05, 20, params={"length": L})
    assert np.all(res.status == OK)
    assert res.backend_note == (
        "lockstep: 19 of 19 runs, blocks of 16 lanes (1 of one params row; 1 of a params row per lane)"
    )


# --------------------------------------------------------------------------- a formula problem's runs as arrays
#: the double pendulum of docs/problems.md: M = diag(m1, m1, m2, m2) (not I), two constraints, l1 in q0 and g
DOUBLE = {**DOUBLE_PENDULUM_FORMULAS, "name": "double_pendulum_arrays"}


def test_a_formula_problems_rows_are_its_instances():
    """The family of a formula problem gives each run's params row, q0, p0 and diagonal of M as the instance built
    at those values does (both from the same expressions: exact equality of plain evaluations is not asserted;
    they agree to round-off)."""
    from hbvm_core.expressions import factory

    build = factory(DOUBLE)
    family = family_of(build())
    values = {"l1": np.array([0.5, 1.0, 1.5]), "m2": np.array([2.0, 3.0, 0.5])}
    K, q0, p0, mass = family.rows(family.broadcast(values, 3))
    for r in range(3):
        pb = build(l1=float(values["l1"][r]), m2=float(values["m2"][r]))
        np.testing.assert_allclose(K[r], pb.kernels.params, rtol=4 * EPS)
        np.testing.assert_allclose(q0[r], pb.q0, rtol=4 * EPS)
        np.testing.assert_allclose(p0[r], pb.p0, atol=0)
        np.testing.assert_allclose(np.diag(mass[r]), pb.M, rtol=4 * EPS)  # Problem keeps M as a matrix
    # by hand: q0 = (l1, 0, l1 + l2, 0), M = diag(m1, m1, m2, m2)
    np.testing.assert_allclose(q0[:, 2], values["l1"] + 0.7, rtol=4 * EPS)
    np.testing.assert_allclose(mass[:, 3], values["m2"], rtol=0)


def test_a_formula_problem_whose_runs_all_have_m_equal_to_i():
    """Masses 1 in every run of a problem whose own M is not I: each run's Cholesky factor is I (by hand)."""
    from hbvm_core.ensemble_runs import Rows
    from hbvm_core.expressions import factory

    family = family_of(factory(DOUBLE)())
    rows = Rows(family, family.broadcast({"m2": np.ones(3)}, 3))
    np.testing.assert_array_equal(rows.L, np.broadcast_to(np.eye(4), (3, 4, 4)))


@pytest.mark.slow
def test_a_formula_problem_with_a_mass_matrix_runs_as_arrays():
    """A grid over l1 (q0 and g) and m2 (M) given as arrays agrees with the same runs given as a list of problems,
    and conserves H and g to round-off (a loop compiled for this problem)."""
    from hbvm_core.expressions import factory

    build = factory(DOUBLE)
    l1 = np.linspace(0.6, 1.4, 12)
    m2 = np.linspace(1.0, 3.0, 12)
    method, N = hc.HBVM(4, 2), 60
    arrays = hc.integrate_ensemble(build(), method, 0.01, N, params={"l1": l1, "m2": m2}, sample_every=10)
    listed = hc.integrate_ensemble([build(l1=a, m2=b) for a, b in zip(l1, m2)], method, 0.01, N, sample_every=10)
    assert np.all(arrays.status == OK)
    for key in ("q", "p", "lam"):
        assert_close(getattr(arrays, key), getattr(listed, key), N, key)
    # H ~ 9.81 * 3 * 1.4 = 40 at most; the fixed point stops at round-off: 1e3 eps of that over 60 steps is generous
    assert arrays.H_error.max() <= 1e3 * EPS * 40
    assert arrays.g_error.max() <= 1e3 * EPS * 4
    assert "M != I per lane, diagonal" in arrays.backend_note  # 12 runs: lockstep, each lane its own M
