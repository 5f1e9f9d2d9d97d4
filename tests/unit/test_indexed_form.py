"""The indexed form of a problem (hbvm_core.indexed): equal to the same problem written out term by term in the
formula form, a reference met twice in one constraint summed into G, one-line refusals naming the key, a grid
over the size, and an identity that follows the mathematics. Nothing is compiled."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.errors import ConfigError, KeywordError

EPS = np.finfo(float).eps

#: a chain hanging from the pin with rods of growing length l (1 + 0.1 i), a spring pulling its last bead
#: sideways, and a coupling of neighbouring beads' heights; straight at angle theta, turning rigidly at omega
#: (bead i at r_i (sin, -cos) theta, r_i = l sum_{j <= i} (1 + 0.1 j) = l (i + 0.05 i (i + 1)))
CHAIN = {
    "name": "bead_chain",
    "params": {"links": 3, "l": 1.0, "grav": 9.81, "k": 2.0, "theta": 0.4, "omega": 0.7},
    "coordinates": {"x": "i in 1..links", "y": "i in 1..links"},
    "fixed": {"x[0]": 0, "y[0]": 0},
    "mass": {"x": "1 + 0.5*sin(i)", "y": "1 + 0.5*sin(i)"},
    "potential": [
        {"sum": "i in 1..links", "term": "grav*(1 + 0.5*sin(i))*y[i]"},
        {"sum": "i in 2..links", "term": "0.1*k*y[i]*y[i-1]"},
        "0.5*k*(x[links] - 1)**2",
    ],
    "constraints": [{"for": "i in 1..links", "g": "(x[i] - x[i-1])**2 + (y[i] - y[i-1])**2 - (l*(1 + 0.1*i))**2"}],
    "q0": {"x": "l*(i + 0.05*i*(i + 1))*sin(theta)", "y": "-l*(i + 0.05*i*(i + 1))*cos(theta)"},
    "p0": {
        "x": "(1 + 0.5*sin(i))*omega*l*(i + 0.05*i*(i + 1))*cos(theta)",
        "y": "(1 + 0.5*sin(i))*omega*l*(i + 0.05*i*(i + 1))*sin(theta)",
    },
}


def written_out(n: int):
    """The same chain in the formula form: every coordinate, term and constraint written out for n links."""
    P = CHAIN["params"] | {"links": n}
    xs = ["0"] + [f"x{i}" for i in range(1, n + 1)]
    ys = ["0"] + [f"y{i}" for i in range(1, n + 1)]
    U = [f"grav*(1 + 0.5*sin({i}))*y{i}" for i in range(1, n + 1)]
    U += [f"0.1*k*y{i}*y{i - 1}" for i in range(2, n + 1)] + [f"0.5*k*(x{n} - 1)**2"]
    g = [f"({xs[i]} - {xs[i - 1]})**2 + ({ys[i]} - {ys[i - 1]})**2 - (l*(1 + 0.1*{i}))**2" for i in range(1, n + 1)]
    r = [f"l*({i} + 0.05*{i}*({i} + 1))" for i in range(1, n + 1)]
    mass = [f"1 + 0.5*sin({i})" for i in range(1, n + 1)]
    return hc.from_expressions(
        "bead_chain",
        [c for i in range(1, n + 1) for c in (f"x{i}", f"y{i}")],
        " + ".join(U),
        [e for ri in r for e in (f"{ri}*sin(theta)", f"-{ri}*cos(theta)")],
        [e for mi, ri in zip(mass, r) for e in (f"({mi})*omega*{ri}*cos(theta)", f"({mi})*omega*{ri}*sin(theta)")],
        params=P,
        mass=[mi for mi in mass for _ in "xy"],
        constraints=g,
    )


def indexed(mapping: dict, **values):
    from hbvm_core.formulas import model_from_mapping

    return model_from_mapping(copy.deepcopy(mapping)).problem(**values)


@pytest.mark.parametrize("n", [2, 4])
def test_the_indexed_chain_equals_it_written_out(n):
    """Every callback, the initial state and M at random states agree to a few eps times their scale."""
    a, b = indexed(CHAIN, links=n), written_out(n)
    assert a.coordinates == tuple(f"{c}[{i}]" for i in range(1, n + 1) for c in "xy")
    assert (a.m, a.nu) == (b.m, b.nu) == (2 * n, n)
    for x, y in ((a.q0, b.q0), (a.p0, b.p0), (a.minv(np.ones(a.m)), b.minv(np.ones(b.m)))):
        np.testing.assert_allclose(x, y, rtol=8 * EPS, atol=8 * EPS)
    rng = np.random.default_rng(n)
    Q, V = rng.normal(size=(4, 2 * n)), rng.normal(size=(4, 2 * n))
    results = {"U": (a.U(Q), b.U(Q)), "grad_U": (a.grad_U(Q), b.grad_U(Q)), "g": (a.g(Q), b.g(Q))}
    results |= {"G": (a.G(Q), b.G(Q)), "d2g": (a.d2g(Q, V), b.d2g(Q, V))}
    for key, (x, y) in results.items():  # the terms' size: grav, k and |Q| ~ 10
        np.testing.assert_allclose(x, y, rtol=0, atol=64 * EPS * (1 + np.abs(y).max()), err_msg=key)


def test_a_reference_met_twice_in_one_constraint_is_summed_into_G():
    """x[i]*x[1] at i = 1 is x_1^2: dg_1/dx_1 = 2 x_1 (by hand), one nonzero, on the sparse path too; g_2 = x_2 x_1
    + x_3^2 - 2 has (x_2, x_1, 2 x_3). At x = (1, 1, 1) both vanish and p = (1, -1, 0) is tangent."""
    spec = {"name": "twice", "coordinates": {"x": "i in 1..3"}, "potential": 0, "q0": 1, "p0": "1.5*i**2 - 6.5*i + 6",
            "constraints": [{"for": "i in 1..2", "g": "x[i]*x[1] + x[i+1]**2 - 2"}]}  # fmt: skip
    q = np.array([0.3, -1.2, 2.0])
    want = np.array([[2 * q[0], q[1]], [2 * q[1], q[0]], [0.0, 2 * q[2]]])
    for linear_algebra in ("dense", "sparse"):
        problem = hc.from_indexed(**spec, linear_algebra=linear_algebra)
        assert problem.sparse.nnz == 5 and np.allclose(problem.p0, [1, -1, 0])
        np.testing.assert_allclose(problem.sparse.matrix(q).toarray(), want, rtol=4 * EPS)
        np.testing.assert_allclose(problem.g(q[None])[0], [q[0] ** 2 + q[1] ** 2 - 2, q[1] * q[0] + q[2] ** 2 - 2])


def test_a_grid_over_the_size_builds_one_problem_per_size(tmp_path):
    from hbvm_workflow.study import expand_study

    study = {"problem": CHAIN, "grid": {"links": [2, 5]}, "methods": [{"k": 2, "s": 2}], "t_end": 0.1, "h": [0.05],
             "errors": {"reference": "none"}}  # fmt: skip
    st = expand_study("s", study, results=str(tmp_path))
    assert [(i.params["links"], i.problem.m, i.problem.nu) for i in st.instances] == [(2, 4, 2), (5, 10, 5)]
    assert st.instances[0].fingerprint != st.instances[1].fingerprint


def test_identity_ignores_formatting_and_follows_the_mathematics():
    same = copy.deepcopy(CHAIN)
    same["constraints"][0]["g"] = "(x[i]-x[-1+i])**2+(y[i]-y[i-1])**2-(l*(1+0.1*i))**2"
    other = copy.deepcopy(CHAIN)
    other["constraints"][0]["g"] = "(x[i] - x[i-1])**2 + (y[i] - y[i-1])**2 - (l*(1 + 0.2*i))**2"
    other["q0"] = {"x": "l*(i + 0.1*i*(i + 1))*sin(theta)", "y": "-l*(i + 0.1*i*(i + 1))*cos(theta)"}
    other["p0"] = 0
    assert indexed(same).identity == indexed(CHAIN).identity != indexed(other).identity


def _with(**changes) -> dict:
    mapping = copy.deepcopy(CHAIN)
    mapping.update(changes)
    return mapping


def _g(text: str, over: str = "i in 1..links") -> list:
    return [{"for": over, "g": text}]


ROD = "(x[i] - x[i-1])**2 + (y[i] - y[i-1])**2 - l**2"
BAD = [
    ("range without index", _with(coordinates={"x": "1..links", "y": "i in 1..links"}),
     "config.studies.s.problem.coordinates.x = '1..links': expected a range 'i in 1..n'"),
    ("bad bound", _with(coordinates={"x": "i in 1..links+", "y": "i in 1..links"}),
     "studies.s.problem.coordinates.x (range) = 'links+': not a formula"),
    ("unknown name in a bound", _with(constraints=_g(ROD, "i in 1..m")),
     "studies.s.problem.constraints[0].for (range) = 'm': 'm' is not a known name"),
    ("index outside its range", _with(constraints=_g(ROD.replace("x[i-1]", "x[i-2]"))),
     "studies.s.problem.constraints[0].g: x[i - 2] at i = 1 is x[-1], outside x's range 1..3 and not fixed"),
    ("non-integer index", _with(constraints=_g(ROD.replace("x[i-1]", "x[i/2]"))),
     "studies.s.problem.constraints[0].g: the index of x[i/2] = 0.5 at i = 1: expected an integer"),
    ("unknown family", _with(constraints=_g(ROD.replace("x[i-1]", "z[i-1]"))), "'z' is not an indexed coordinate"),
    ("family without index", _with(constraints=_g(ROD.replace("x[i-1]", "x"))),
     "studies.s.problem.constraints[0].g = '(x[i] - x)**2 + (y[i] - y[i-1])**2 - l**2': 'x' is indexed"),
    ("unknown index name", _with(constraints=_g(ROD.replace("x[i-1]", "x[j]"))), "'j' is not a known name"),
    ("index of a coordinate", _with(constraints=_g(ROD.replace("x[i-1]", "x[y[i]]"))),
     "studies.s.problem.constraints[0].g: the index of 'x[y[i]]' must be a formula of i and the params"),
    ("unknown key of a term", _with(constraints=[{"for": "i in 1..links", "h": ROD}]),
     "config.studies.s.problem.constraints[0]: unknown key 'h' (expected one of for, g)"),
    ("q0 of an unknown family", _with(q0={"x": 0, "z": 0}), "studies.s.problem.q0.z: not an indexed coordinate"),
    ("q0 missing a family", _with(q0={"x": 0}), "studies.s.problem.q0: no formula for 'y'"),
    ("fixed inside the range", _with(fixed={"x[1]": 0, "y[0]": 0}),
     "studies.s.problem.fixed['x[1]']: x[1] is a coordinate (x in 1..3)"),
    ("fixed of an unknown family", _with(fixed={"z[0]": 0}), "studies.s.problem.fixed['z[0]']: expected a reference"),
    ("size not an integer", _with(params=CHAIN["params"] | {"links": 2.5}),
     "studies.s.problem.coordinates.x = 'i in 1..links': upper bound: links = 2.5"),
    ("plain term past the end", _with(potential="y[links + 1]"),
     "studies.s.problem.potential: y[links + 1] is y[4], outside y's range 1..3 and not fixed"),
    ("unknown key", _with(Potential="y[1]"), "config.studies.s.problem: unknown key 'Potential'"),
    ("index named as a param", _with(coordinates={"x": "l in 1..links", "y": "i in 1..links"}),
     "studies.s.problem.coordinates.x = 'l in 1..links': the index 'l' is already a name"),
    ("inconsistent q0", _with(p0=0, q0={"x": 0, "y": "-i"}), "inconsistent initial data"),
]  # fmt: skip


@pytest.mark.parametrize("mapping,message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_indexed_input_is_refused_in_one_line_naming_the_key(mapping, message):
    from hbvm_workflow.loading import load_studies

    study = {"problem": mapping, "methods": [{"k": 2, "s": 2}], "t_end": 1.0, "h": [0.1],
             "errors": {"reference": "self"}}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        load_studies({"studies": {"s": study}, "results": "results-unused"})
    text = str(info.value)
    assert "\n" not in text and message in text, text


def test_from_indexed_refuses_an_unknown_keyword_and_a_missing_formula():
    with pytest.raises(KeywordError, match="unknown keyword .constraint. .*did you mean .constraints."):
        hc.from_indexed("p", {"x": "i in 1..2"}, 0, 0, 0, constraint=[])
    with pytest.raises(
        ConfigError, match=r"^problem\.constraints\[0\] = \[\'x\[1\]\'\]: expected a formula or \{for: 'i in 1\.\.n'"
    ):
        hc.from_indexed("p", {"x": "i in 1..2"}, 0, 0, 0, constraints=[["x[1]"]])


def test_an_unconstrained_spring_chain_has_its_hand_gradient():
    """Springs k between x[0] = a (fixed), x[1..n] and 0 beyond: dU/dx_i = k (2 x_i - x_{i-1} - x_{i+1}) by hand,
    with x_0 = a and x_{n+1} = 0; nu = 0, an empty range (links = 1's couplings over 2..1) adds nothing."""
    n, k, a = 5, 3.0, 0.5
    springs = [{"sum": "i in 1..n", "term": "0.5*k*(x[i] - x[i-1])**2"}, "0.5*k*x[n]**2"]
    springs.append({"sum": "i in 2..1", "term": "x[i]**4"})
    problem = hc.from_indexed("springs", {"x": "i in 1..n"}, springs, {"x": "sin(i)"}, 0,
                              params={"n": n, "k": k}, fixed={"x[0]": a})  # fmt: skip
    assert problem.nu == 0 and problem.g is None
    Q = np.random.default_rng(0).normal(size=(3, n))
    X = np.concatenate([np.full((3, 1), a), Q, np.zeros((3, 1))], axis=1)
    want = k * (2 * X[:, 1:-1] - X[:, :-2] - X[:, 2:])
    np.testing.assert_allclose(problem.grad_U(Q), want, rtol=0, atol=8 * EPS * k * np.abs(X).max())
    U = 0.5 * k * (np.diff(X[:, :-1], axis=1) ** 2).sum(axis=1) + 0.5 * k * Q[:, -1] ** 2
    np.testing.assert_allclose(problem.U(Q), U, rtol=8 * EPS)
