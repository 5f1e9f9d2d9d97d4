"""Failures told one way: a failing run names its step as docs/method.md counts them (step n on [t_n, t_{n+1}],
from 0, t_n = n h) whatever the method; bad input says in one line what is wrong and what is allowed."""

from __future__ import annotations

import numpy as np
import pytest
from bad_problems import nan_later

import hbvm_core as hc
from hbvm_core.errors import ConfigError, ConvergenceError, HBVMError, KeywordError, NonFiniteError, ProblemError
from hbvm_core.methods import method_from_entry
from hbvm_workflow.schema import validate_config

METHODS = [
    {"k": 2, "s": 2},
    {"k": 2, "s": 2, "solver": "blended"},
    {"method": "hbvm", "k": 3, "s": 2, "multiplier": "polynomial"},
    {"method": "rattle"},
    {"method": "dop853"},
    {"method": "ida"},
]
H = 0.1


def crossing_step(y_max: float = -0.8) -> int:
    """The step n (on [n H, (n + 1) H]) in which the bob of nan_later first rises above y_max: the oracle, from a
    fine HBVM run of the same pendulum without the NaN (h = H / 100, so the crossing is located to 1e-3)."""
    fine = hc.integrate(nan_later(y_max=10.0), method_from_entry({"k": 2, "s": 2}), H / 100, 1.0, backend="numpy")
    t_cross = fine.t[np.argmax(fine.q[:, 1] > y_max)]
    return int(np.floor(t_cross / H - 1e-9))  # t_cross in (n H, (n + 1) H]


@pytest.mark.parametrize("entry", METHODS, ids=lambda e: "-".join(str(v) for v in e.values()))
def test_every_method_names_the_step_in_which_the_trajectory_left_the_finite_region(entry):
    n = crossing_step()
    assert 0.6 < (n + 1) * H and n * H < 0.7 + 1e-12  # the bob crosses y = -0.8 near t = 0.7 (tests/bad_problems)
    with pytest.raises((NonFiniteError, ConvergenceError)) as info:
        hc.integrate(nan_later(), method_from_entry(entry), H, 2.0, backend="numpy")
    assert f"at step {n} (t = {n * H:.6g})" in str(info.value), str(info.value)
    if entry.get("method") not in ("dop853", "ida"):  # a fixed-step method evaluates the callback: it names it
        assert isinstance(info.value, NonFiniteError) and "callback grad_U returned non-finite values" in str(
            info.value
        )


def test_an_inconsistent_initial_point_names_the_constraint():
    with pytest.raises(ProblemError, match=r"constraint 1 \(of 2, counted from 0\) has g_1\(q0\) = 3\.000e-01$"):
        hc.from_expressions("p", ["x", "y", "z"], "z", [0, -1, 0.3], [1, 0, 0], constraints=["x**2 + y**2 - 1", "z"])


def test_an_h_larger_than_the_interval_says_so():
    method = method_from_entry({"k": 1, "s": 1})
    with pytest.raises(ConfigError, match=r"^h = 20\.0 is larger than the interval \[0, 10\.0\]"):
        hc.integrate(hc.get_problem("planar_pendulum"), method, 20.0, 10.0)


@pytest.mark.parametrize("name", ["bad name", "_x", "a.b"])
def test_a_study_name_off_the_pattern_is_told_in_words(name):
    study = {"problem": "planar_pendulum", "methods": [{"k": 1, "s": 1}], "errors": {"reference": "exact"}}
    with pytest.raises(ConfigError) as info:
        validate_config({"studies": {name: study}})
    assert (
        str(info.value)
        == f"config.studies: bad name {name!r} (letters, digits, _ and -, starting with a letter or digit)"
    )


@pytest.mark.parametrize("key", ["potential", "constraints"])
def test_abs_is_not_offered_where_it_is_refused(key):
    args = {"potential": "y", "constraints": ["x**2 + y**2 - 1"]}
    with pytest.raises(ConfigError) as unknown:
        hc.from_expressions(
            "p", ["x", "y"], q0=[0, -1], p0=[1, 0], **args | {key: "foo(y)" if key == "potential" else ["foo(y)"]}
        )
    assert "functions sin, cos" in str(unknown.value) and "abs" not in str(unknown.value)
    with pytest.raises(ConfigError, match=r"not differentiable \(abs\)"):
        hc.from_expressions(
            "p", ["x", "y"], q0=[0, -1], p0=[1, 0], **args | {key: "abs(y)" if key == "potential" else ["abs(y) - 1"]}
        )
    # where it is allowed (the mass, here a number's) it is listed
    with pytest.raises(ConfigError) as offered:
        hc.from_expressions("p", ["x", "y"], "y", [0, -1], [1, 0], period="foo(1)")
    assert "abs" in str(offered.value)


def test_a_misspelt_keyword_of_the_python_api_gets_a_did_you_mean():
    with pytest.raises(KeywordError, match=r"^Problem\(\): unknown keyword 'gradU' .*; did you mean 'grad_U'\?$"):
        hc.Problem(name="x", q0=[0.0], p0=[0.0], gradU=None)
    with pytest.raises(
        KeywordError, match=r"^from_expressions\(\): unknown keyword 'parms' .*; did you mean 'params'\?$"
    ):
        hc.from_expressions("p", ["x"], "x**2", [0], [1], parms={})
    assert issubclass(KeywordError, (HBVMError, TypeError))
