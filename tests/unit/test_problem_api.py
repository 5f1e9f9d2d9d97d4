"""The problem API: M as a matrix, a diagonal or a scalar; the callbacks a study's features need."""

from __future__ import annotations

import numpy as np
import pytest
from user_problems import double_pendulum

import hbvm_core as hc
from hbvm_core.errors import ConfigError, ProblemError
from hbvm_core.methods import method_from_entry
from hbvm_workflow.study import expand_study


def _with_mass(M, m1=1.0, m2=2.0):
    """The double pendulum with its mass matrix given as ``M`` (the same numbers, another form)."""
    pb = double_pendulum(m1=m1, m2=m2)
    kw = {f: getattr(pb, f) for f in ("name", "q0", "p0", "U", "grad_U", "g", "G", "d2g")}
    return hc.Problem(M=M, **kw)


def _run(pb):
    return hc.integrate(pb, method_from_entry({"k": 2, "s": 2}), 0.05, 0.5, backend="numpy")


@pytest.mark.parametrize("form", ["vector", "scalar"])
def test_mass_as_a_vector_or_a_scalar_is_the_full_matrix(form):
    mass = np.array([2.0, 2.0, 2.0, 2.0]) if form == "scalar" else np.array([1.0, 1.0, 2.0, 2.0])
    full = _run(_with_mass(np.diag(mass), 2.0 if form == "scalar" else 1.0, 2.0))
    given = mass if form == "vector" else 2.0
    other = _run(_with_mass(given, 2.0 if form == "scalar" else 1.0, 2.0))
    assert np.allclose(other.y(), full.y(), rtol=0, atol=1e-13)
    assert np.allclose(other.lam, full.lam, rtol=0, atol=1e-12)


def test_unit_mass_given_as_a_scalar_or_ones_is_the_identity_bit_for_bit():
    none = _run(_with_mass(None, 1.0, 1.0))
    for M in (1.0, np.ones(4)):
        pb = _with_mass(M, 1.0, 1.0)
        assert pb.M is None
        np.testing.assert_array_equal(_run(pb).y(), none.y())


@pytest.mark.parametrize(
    "M, message",
    [
        (np.ones((3, 3)), r"M must be a scalar, a vector of 4 diagonal entries or a symmetric 4x4 matrix, got shape"),
        (np.ones(3), r"got shape \(3,\)"),
        (-1.0, "M is not positive definite"),
    ],
)
def test_a_bad_mass_is_one_line(M, message):
    with pytest.raises(ProblemError, match=message) as exc:
        _with_mass(M)
    assert "\n" not in str(exc.value)


BASE = {"problem": "user_problems:pendulum_without_d2g", "methods": [{"k": 1, "s": 1}], "t_end": 1, "h": [0.1]}


@pytest.mark.parametrize(
    "over, message",
    [
        (
            {"errors": {"reference": "reference"}},
            "studies.s.errors.reference = 'reference': problem 'user_problems:pendulum_without_d2g' has no d2g "
            r"\(needed for lambda\(q, p\) and the index-reduced reference ODE\)",
        ),
        (
            {"errors": {"reference": "exact"}},
            r"'user_problems:pendulum_without_d2g' has no closed-form solution \(no exact=",
        ),
        ({"periods": 2, "t_end": None}, r"studies.s.periods: .* has no period; give t_end \(or period="),
        (
            {"period_divisions": [10], "h": None},
            r"studies.s.period_divisions: the problem has no period \(no period=\)",
        ),
        ({"errors": {"reference": "self", "sample": "periods"}}, r"errors.sample = 'periods': .* \(no period=\)"),
    ],
    ids=["d2g", "exact", "periods", "period_divisions", "sample periods"],
)
def test_a_missing_callback_is_named_when_a_study_needs_it(over, message):
    cfg = {k: v for k, v in {**BASE, "errors": {"reference": "self"}, **over}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        expand_study("s", cfg)


def test_reference_self_needs_no_d2g():
    assert len(expand_study("s", {**BASE, "errors": {"reference": "self"}}).jobs) == 2
