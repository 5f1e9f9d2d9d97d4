"""Each bad input to the core gets a clear one-line error naming the key or value (issues 2, 5)."""

import numpy as np
import pytest
from user_problems import double_pendulum

import hbvm_core as hc
from hbvm_core.errors import ConfigError, ConvergenceError, NonFiniteError, ProblemError
from hbvm_core.metrics import ErrorConvention


def pendulum(**overrides):
    kw = dict(
        name="p",
        q0=[0.0, -1.0],
        p0=[1.0, 0.0],
        U=lambda Q: Q[:, 1].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 1.0], Q.shape).copy(),
        g=lambda Q: (Q[:, 0] ** 2 + Q[:, 1] ** 2 - 1.0)[:, None],
        G=lambda Q: 2.0 * Q[:, :, None],
    )
    kw.update(overrides)
    return hc.Problem(**kw)


PROBLEMS = [
    ({"q0": [0.0, -1.1]}, ProblemError, r"inconsistent initial data, \|g\(q0\)\|"),
    ({"p0": [0.0, 1.0]}, ProblemError, "inconsistent initial data, hidden constraint"),
    ({"p0": [1.0, 0.0, 0.0]}, ProblemError, "p0 has 3 entries, q0 has 2"),
    ({"grad_U": lambda Q: Q[:, :1]}, ProblemError, r"callback grad_U returned shape \(2, 1\), expected \(2, 2\)"),
    ({"G": lambda Q: 2.0 * Q}, ProblemError, r"callback G returned shape \(2, 2\), expected \(2, 2, 1\)"),
    ({"U": lambda Q: np.full(len(Q), np.nan)}, NonFiniteError, "callback U returned non-finite values"),
    (
        {
            "g": lambda Q: np.repeat((np.sum(Q**2, 1) - 1)[:, None], 2, 1),
            "G": lambda Q: np.repeat(2.0 * Q[:, :, None], 2, 2),
        },
        ProblemError,
        "nu = 2 constraints need nu < m = 2",
    ),
    ({"M": np.diag([1.0, -1.0])}, ProblemError, "M is not positive definite"),
    (
        {"M": np.ones((3, 3))},
        ProblemError,
        r"M must be a scalar, a vector of 2 diagonal .* 2x2 matrix, got shape \(3, 3\)$",
    ),
    ({"M": [1.0, 2.0, 3.0]}, ProblemError, r"got shape \(3,\)$"),
    ({"M": [1.0, 0.0]}, ProblemError, "M is not positive definite"),
    ({"G": None}, ProblemError, "give both g and G"),
]


@pytest.mark.parametrize("overrides,exc,message", PROBLEMS)
def test_bad_problem(overrides, exc, message):
    with pytest.raises(exc, match=message):
        pendulum(**overrides)


def test_singular_constraint_jacobian():
    """Two copies of the same constraint in R^3: G^T M^-1 G is singular."""
    with pytest.raises(ProblemError, match="G\\^T M\\^-1 G is singular at q0"):
        hc.Problem(
            name="twice",
            q0=[0.0, 0.0, -1.0],
            p0=[1.0, 0.0, 0.0],
            U=lambda Q: Q[:, 2].copy(),
            grad_U=lambda Q: np.broadcast_to([0.0, 0.0, 1.0], Q.shape).copy(),
            g=lambda Q: np.repeat((np.sum(Q**2, 1) - 1)[:, None], 2, 1),
            G=lambda Q: np.repeat(2.0 * Q[:, :, None], 2, 2),
        )


CALLS = [
    (lambda pb: hc.integrate(pb, hc.HBVM(1, 2), 0.1, 1.0), ConfigError, r"k = 1: expected an integer k >= s = 2"),
    (lambda pb: hc.integrate(pb, hc.HBVM(1, 0), 0.1, 1.0), ConfigError, "s = 0: expected an integer >= 1"),
    (lambda pb: hc.integrate(pb, hc.HBVM(2, 2), 0.0, 1.0), ConfigError, "h = 0.0: expected a finite step size > 0"),
    (lambda pb: hc.integrate(pb, hc.HBVM(2, 2), -0.1, 1.0), ConfigError, "h = -0.1: expected a finite step size"),
    (lambda pb: hc.integrate(pb, hc.HBVM(2, 2), float("nan"), 1.0), ConfigError, "h = nan"),
    (lambda pb: hc.integrate(pb, hc.HBVM(2, 2), 0.1, -1.0), ConfigError, "t_end = -1.0: expected a finite end time"),
    (lambda pb: hc.integrate(pb, hc.HBVM(2, 2), 0.3, 1.0), ConfigError, r"h = 0.3 does not divide the interval"),
    (lambda pb: hc.integrate(pb, hc.HBVM(2, 2), 0.1, 1.0, save_every=0), ConfigError, "save_every = 0"),
    (lambda pb: hc.integrate(pb, hc.HBVM(2, 2, solver="newton"), 0.1, 1.0), ConfigError, "solver = 'newton'"),
    (lambda pb: hc.integrate(pb, hc.HBVM(2, 2), 0.1, 1.0, backend="gpu"), ConfigError, "backend = 'gpu'"),
]


@pytest.mark.parametrize("call,exc,message", CALLS)
def test_bad_integration_arguments(planar, call, exc, message):
    with pytest.raises(exc, match=message):
        call(planar)


@pytest.mark.parametrize(
    "problem_entry,message",
    [
        ("no_such_problem", "problem = 'no_such_problem': unknown problem"),
        ("no_such_module:f", "cannot import module 'no_such_module'"),
        ("user_problems:nothing", "module 'user_problems' has no callable 'nothing'"),
        ("numpy:zeros", "factory returned"),
    ],
)
def test_bad_problem_entry(problem_entry, message):
    with pytest.raises(ConfigError, match=message):
        hc.get_problem(problem_entry, **({"shape": 3} if problem_entry == "numpy:zeros" else {}))


@pytest.mark.parametrize(
    "cfg,message",
    [
        ({"reference": "closest"}, "errors.reference = 'closest'"),
        ({"norm": 3}, "errors.norm = 3: expected one of 1, 2, inf"),
        ({"sample": -0.1}, "errors.sample = -0.1"),
        ({"sample": "sometimes"}, "errors.sample = 'sometimes'"),
        ({"normm": 1}, "errors.normm: unknown key"),
    ],
)
def test_bad_error_convention(cfg, message):
    with pytest.raises(ConfigError, match=message):
        ErrorConvention.from_config(cfg)


def test_exact_reference_for_a_problem_without_closed_form(modified):
    with pytest.raises(ConfigError, match="problem 'modified_pendulum' has no closed-form solution"):
        ErrorConvention(reference="exact").check_problem(modified)
    with pytest.raises(ConfigError, match="has no period"):
        ErrorConvention(reference="reference", sample="periods").check_problem(double_pendulum())


def test_nan_in_callback_during_the_run_is_named():
    """grad_U turns NaN once the pendulum rises above y = -0.9: the error names the callback and the step."""

    def grad_U(Q):
        out = np.broadcast_to([0.0, 1.0], Q.shape).copy()
        out[Q[:, 1] > -0.9] = np.nan
        return out

    with pytest.raises(NonFiniteError, match=r"callback grad_U returned non-finite values at step \d+ \(t = "):
        hc.integrate(pendulum(grad_U=grad_U), hc.HBVM(2, 2), 0.1, 5.0)


def test_diverging_iteration_names_step_time_and_increment(planar):
    with pytest.raises(ConvergenceError, match=r"failed at step 2 \(t = 5\): no convergence after 100 iterations") as e:
        hc.integrate(planar, hc.HBVM(2, 2), 2.5, 25.0, backend="numpy")  # the compiled loop: test_kernels
    assert e.value.step == 2 and e.value.t == 5.0 and e.value.increment > 0
