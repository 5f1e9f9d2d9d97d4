"""Problems from expressions: the restricted grammar, one-line refusals, identity, and the config mapping."""

import copy

import numpy as np
import pytest
from user_problems import PENDULUM_EXPRESSIONS

import hbvm_core as hc
from hbvm_core.errors import ConfigError
from hbvm_core.expressions import Model, parse

#: the shared pendulum with the g = 9.81 and p0 = (1, 0) these tests were written for
PENDULUM = {**PENDULUM_EXPRESSIONS, "params": {"length": 1.0, "grav": 9.81}, "p0": [1, 0]}


def study(problem, **extra):
    return {
        "problem": problem,
        "methods": [{"k": 2, "s": 2}],
        "t_end": 1.0,
        "h": [0.1],
        "errors": {"reference": "self"},
        **extra,
    }


def load(problem, **extra):
    from hbvm_workflow.loading import load_studies

    return load_studies({"studies": {"s": study(problem, **extra)}, "results": "results-unused"})["s"]


def with_(**changes):
    mapping = copy.deepcopy(PENDULUM)
    mapping.update(changes)
    return mapping


BAD = [
    ("unknown name", with_(potential="grav*w"), "studies.s.problem.potential = 'grav*w': 'w' is not a known name"),
    (
        "__import__",
        with_(potential="__import__('os').system('true')"),
        "studies.s.problem.potential = \"__import__('os').system('true')\": '__import__' is not a known name",
    ),
    ("attribute access", with_(potential="y.real"), "studies.s.problem.potential = 'y.real': 'y.real' is not allowed"),
    ("subscript", with_(potential="x[0]"), "'x[0]' is not allowed"),
    ("lambda", with_(potential="(lambda: 1)()"), "is not an allowed function"),
    ("unknown function", with_(potential="eval('1')"), "'eval' is not an allowed function"),
    ("a string literal", with_(potential="'y'"), "\"'y'\" is not a number"),
    ("not a formula", with_(potential="y +"), "studies.s.problem.potential = 'y +': not a formula"),
    (
        "constraint not differentiable",
        with_(constraints=["abs(x) + y**2 - length"]),
        "studies.s.problem.constraints[0]: not differentiable (abs)",
    ),
    ("wrong-length q0", with_(q0=[0, 0, "-length"]), "studies.s.problem.q0: 3 entries, expected 2"),
    ("huge power", with_(potential="y + 2**10**10"), "is too large a power"),
    ("unknown key", with_(Potential="y"), "config.studies.s.problem"),
    ("inconsistent q0", with_(q0=[0, -2]), "inconsistent initial data"),
    ("reserved name", with_(coordinates=["x", "t"]), "studies.s.problem.coordinates: 't' is reserved"),
]


@pytest.mark.parametrize("mapping,message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_expressions_are_refused_with_one_line(mapping, message):
    with pytest.raises(ConfigError) as info:
        load(mapping)
    text = str(info.value)
    assert "\n" not in text and message in text, text


def test_the_grammar_builds_sympy_without_evaluating_strings():
    import sympy as sp

    x, a = sp.Symbol("x", real=True), sp.Symbol("a", real=True)
    e = parse("-a*x**2/2 + sin(x)*exp(-x) + atan2(x, a) + pi", {"x": x, "a": a}, "k")
    assert sp.simplify(e - (-a * x**2 / 2 + sp.sin(x) * sp.exp(-x) + sp.atan2(x, a) + sp.pi)) == 0
    with pytest.raises(ConfigError, match="'open' is not an allowed function"):
        parse("open('/etc/passwd')", {"x": x}, "k")


def test_identity_ignores_formatting_and_follows_the_mathematics():
    base = Model(**PENDULUM).identity
    spaced = Model(**with_(potential=" y *grav ", constraints=["y**2+x**2-length**2"])).identity
    assert spaced == base
    assert Model(**with_(potential="grav*y + 0*x")).identity == base  # sympy's canonical form: 0*x vanishes
    assert Model(**with_(potential="grav*y**1.0")).identity != base  # a float power is other arithmetic
    assert Model(**with_(constraints=["x**2 + y**2 - 2*length**2"])).identity != base
    assert Model(**with_(p0=[2, 0])).identity != base
    # the values of the parameters are not in the identity but in the problem's params
    assert hc.get_problem(PENDULUM, length=2.0).identity == hc.get_problem(PENDULUM).identity
    assert hc.get_problem(PENDULUM, length=2.0).params == {"length": 2.0, "grav": 9.81}


def test_fingerprint_is_unchanged_by_reformatting_and_changed_by_a_parameter():
    from hbvm_core.fingerprint import problem_fingerprint

    a = problem_fingerprint(hc.get_problem(PENDULUM))
    b = problem_fingerprint(hc.get_problem(with_(potential="y*grav ", constraints=["-length**2 + y**2 + x**2"])))
    assert a == b
    assert problem_fingerprint(hc.get_problem(PENDULUM, grav=1.0)) != a


def test_mass_forms_and_initial_values_from_params():
    # p0 = M (1, 0): the velocity M^-1 p0 = (1, 0) is tangent to the circle at q0 = (0, -length)
    full = hc.get_problem(with_(mass=[["2*grav", 1], [1, 3]], q0=[0, "-length"], p0=["2*grav", "3/2 - 1/2"]))
    assert np.array_equal(full.M, [[2 * 9.81, 1.0], [1.0, 3.0]])
    assert full.p0.tolist() == [2 * 9.81, 1.0]
    diag = hc.get_problem(with_(mass=["grav", "grav"]))
    assert np.array_equal(np.diag(diag.M), [9.81, 9.81])
    assert hc.get_problem(with_(mass=1)).M is None
    with pytest.raises(ConfigError, match=r"problem.mass\[1\]\[0\]: not equal to mass\[0\]\[1\]"):
        hc.get_problem(with_(mass=[[1, 0], [1, 1]]))


def test_grid_over_a_parameter_builds_one_instance_per_value():
    st = load(PENDULUM, grid={"length": [0.5, 2.0]})
    assert [i.params for i in st.instances] == [{"length": 0.5}, {"length": 2.0}]
    assert [i.problem.q0[1] for i in st.instances] == [-0.5, -2.0]
    assert st.instances[0].fingerprint != st.instances[1].fingerprint
    assert st.problem == "pendulum"  # tables and plots name it
    with pytest.raises(ConfigError, match="studies.s.grid.mass: not a keyword of problem 'pendulum'"):
        load(PENDULUM, grid={"mass": [1.0]})


def test_job_hash_is_unchanged_by_reformatting():
    a = next(iter(load(PENDULUM).jobs.values())).hash
    b = next(iter(load(with_(potential="y*grav")).jobs.values())).hash
    assert a == b


def test_unconstrained_and_closed_form():
    osc = hc.get_problem(
        {
            "name": "oscillator",
            "coordinates": ["x"],
            "params": {"w": 2.0},
            "potential": "w**2*x**2/2",
            "q0": [1],
            "p0": [0],
            "period": "2*pi/w",
            "exact": {"q": ["cos(w*t)"], "p": ["-w*sin(w*t)"]},
        }
    )
    assert osc.nu == 0 and osc.period == pytest.approx(np.pi)
    q, p, lam = osc.exact(np.array([0.0, 0.25]))
    assert q[:, 0] == pytest.approx([1.0, np.cos(0.5)]) and lam.shape == (2, 0)
    assert osc.grad_U(np.array([[0.5]]))[0, 0] == pytest.approx(2.0)
