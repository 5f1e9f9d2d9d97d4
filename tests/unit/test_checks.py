"""Checks of hand-written callbacks when a problem is built (hbvm_core.checks): vectorisation, derivatives against
central differences, compiled callbacks against the numpy ones, and the switch that turns the derivative checks off.

The expected discrepancies are the bugs' own sizes, computed by hand: a derivative of the wrong sign differs from
the right one by 2 times its size; a Hessian form twice too large by 1/2 of its (larger) size; a gradient whose two
entries are swapped, (0, 9.81) against (9.81, 0), by 1 times its size.
"""

from __future__ import annotations

import numpy as np
import pytest
from bad_problems import U_of_one_point, bead_on_parabola, g_of_one_point
from user_problems import bead_on_torus, double_pendulum, pendulum_without_d2g

import hbvm_core as hc
from hbvm_core.checks import TOL, derivative_checks
from hbvm_core.errors import ProblemError
from hbvm_core.kernels import Kernels, kernel
from hbvm_core.problems import BUILTIN


def parabola(**overrides) -> hc.Problem:
    """The bead on y = x^2 (bad_problems.bead_on_parabola with the right G), with callbacks replaced."""
    right = bead_on_parabola(1.0)
    kw = {key: getattr(right, key) for key in ("name", "q0", "p0", "U", "grad_U", "g", "G", "d2g")}
    return hc.Problem(**(kw | overrides))


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_shipped_problems_pass(name):
    hc.get_problem(name)  # builds with check_derivatives on (the default); raises on a mismatch


@pytest.mark.parametrize("factory", [double_pendulum, bead_on_torus, pendulum_without_d2g, bead_on_parabola])
def test_user_problems_pass(factory):
    problem = factory(1.0) if factory is bead_on_parabola else factory()  # +1: the right sign of G
    assert problem.check_derivatives


def test_wrong_sign_of_G_is_refused_with_one_line():
    with pytest.raises(ProblemError) as info:
        bead_on_parabola(-1.0)
    message = one_line(info)
    assert message.startswith(
        "bead_on_parabola: callback G does not match the central differences of g at q0 (q = [0.5, 0.25]): "
        "relative discrepancy 2.00e+00 (tolerance 1e-06)"
    ), message
    assert "check_derivatives=False" in message


def test_d2g_missing_a_factor_is_refused():
    with pytest.raises(ProblemError) as info:
        parabola(d2g=lambda Q, V: (-4.0 * V[:, 0] ** 2)[:, None])
    assert "callback d2g does not match the central differences of G at q0" in one_line(info)
    assert "relative discrepancy 5.00e-01" in str(info.value)


def test_swapped_gradient_is_refused():
    with pytest.raises(ProblemError) as info:
        parabola(grad_U=lambda Q: np.stack([np.full(len(Q), 9.81), np.zeros(len(Q))], axis=1))
    assert "callback grad_U does not match the central differences of U at q0" in one_line(info)
    assert "relative discrepancy 1.00e+00" in str(info.value)


def test_transposed_constraint_columns_are_refused():
    """The double pendulum's two columns of G swapped (G[:, :, ::-1]): the gradient of g_1 given for g_2."""
    right = double_pendulum()
    with pytest.raises(ProblemError, match="callback G does not match the central differences of g at q0"):
        hc.Problem(
            name="swapped",
            q0=right.q0,
            p0=right.p0,
            M=right.M,
            U=right.U,
            grad_U=right.grad_U,
            g=right.g,
            G=lambda Q: right.G(Q)[:, :, ::-1],
        )


@kernel
def _grad_U_right(Q, out, params):
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = params[0]


@kernel
def _grad_U_wrong_sign(Q, out, params):
    for i in range(Q.shape[0]):
        out[i, 0] = 0.0
        out[i, 1] = -params[0]


def test_compiled_callbacks_against_numpy():
    parabola(kernels=Kernels(grad_U=_grad_U_right, params=(9.81,)))  # agrees: accepted
    with pytest.raises(ProblemError) as info:
        parabola(kernels=Kernels(grad_U=_grad_U_wrong_sign, params=(9.81,)))
    assert "callback kernels.grad_U does not match the numpy callback grad_U at q0" in one_line(info)
    assert "relative discrepancy 2.00e+00" in str(info.value)


def test_compiled_callbacks_by_name_are_checked():
    """A 'module:function' string resolves to its Python function (nothing compiled)."""
    with pytest.raises(ProblemError, match="kernels.grad_U does not match"):
        parabola(kernels=Kernels(grad_U=f"{__name__}:_grad_U_wrong_sign", params=(9.81,)))


def test_exact_zero_derivatives_pass():
    """U = 0 and grad_U = 0: central differences of a constant are exactly 0, no division by a zero scale."""
    hc.Problem(
        name="free",
        q0=[0.3, -0.2],
        p0=[1.0, 0.5],
        U=lambda Q: np.zeros(len(Q)),
        grad_U=lambda Q: np.zeros_like(Q),
    )


def test_the_switch_turns_the_derivative_checks_off():
    wrong_G = bead_on_parabola(1.0).G
    assert parabola(G=lambda Q: -wrong_G(Q), check_derivatives=False).nu == 1
    with derivative_checks(False):
        assert bead_on_parabola(-1.0).nu == 1
    with pytest.raises(ProblemError):  # the block over, the checks are back
        bead_on_parabola(-1.0)


def test_the_study_key_turns_the_derivative_checks_off():
    from hbvm_core.errors import ConfigError
    from hbvm_workflow.loading import load_studies

    study = {
        "problem": "bad_problems:bead_on_parabola",
        "methods": [{"k": 2, "s": 2}],
        "t_end": 1,
        "h": [0.1],
        "errors": {"reference": "none"},
    }
    with pytest.raises(ConfigError, match="callback G does not match"):
        load_studies({"studies": {"s": study}})
    assert list(load_studies({"studies": {"s": {**study, "check_derivatives": False}}})) == ["s"]


def test_not_vectorised_g_is_refused_with_one_line():
    with pytest.raises(ProblemError) as info:
        g_of_one_point()
    assert one_line(info) == (
        "g_of_one_point: callback g raised IndexError for Q of shape (1, 2) (index 1 is out of bounds for axis 0 "
        "with size 1); callbacks receive Q of shape (n, m) (n points) and must return (n, ...)"
    )


def test_not_vectorised_U_is_refused_with_one_line():
    with pytest.raises(ProblemError) as info:
        U_of_one_point()
    assert one_line(info).startswith("U_of_one_point: callback U raised IndexError for Q of shape (1, 2)")
    assert info.value.args[0].endswith("callbacks receive Q of shape (n, m) (n points) and must return (n, ...)")


def test_a_callback_returning_m_rows_is_refused():
    """A callback that returns one value per coordinate, not per point: the leading axis is m = 3, not n."""
    with pytest.raises(ProblemError) as info:
        hc.Problem(
            name="rows",
            q0=[0.1, 0.2, 0.3],
            p0=[0.0, 0.0, 0.0],
            U=lambda Q: np.sum(Q, axis=0),
            grad_U=lambda Q: np.ones_like(Q),
        )
    assert one_line(info).startswith("rows: callback U returned shape (3,) for Q of shape (1, 3); callbacks receive")


def test_the_tolerance_sits_between_rounding_and_bugs():
    """The smallest bug above (a factor 1/2: discrepancy 0.5) is 10^5 times the tolerance; central differences
    with h = eps^(1/3) are accurate to about eps^(2/3) ~ 4e-11, 10^4 times below it."""
    eps = np.finfo(float).eps
    assert 0.5 / TOL >= 1e5 and TOL / eps ** (2 / 3) >= 1e4
