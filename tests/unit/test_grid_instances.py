"""A grid's instances planned per code: one validated in full, the initial data of all checked at once, the first
bad one named in one line."""

from __future__ import annotations

import numpy as np
import pytest

import hbvm_core as hc
from hbvm_core.errors import ConfigError
from hbvm_workflow.layout import short_h
from hbvm_workflow.study import expand_study

VALUES = np.linspace(0.5, 2.0, 10_000)
#: the grid values whose instance starts off its constraint or its hidden constraint (``drifting_pendulum``)
OFF_G, OFF_HIDDEN = [float(VALUES[6789]), float(VALUES[8000])], [float(VALUES[8500])]


def drifting_pendulum(length: float = 1.0) -> hc.Problem:
    """The planar pendulum of ``length`` (g = x^2 + y^2 - length^2), started at the bottom; at the lengths of
    ``OFF_G`` q0 is 1e-3 below the circle, at those of ``OFF_HIDDEN`` p0 has a radial part 1e-3."""
    y0 = -length - (1e-3 if length in OFF_G else 0.0)
    return hc.Problem(
        name="drifting_pendulum",
        q0=[0.0, y0],
        p0=[length, 1e-3 if length in OFF_HIDDEN else 0.0],
        U=lambda Q: Q[:, 1].copy(),
        grad_U=lambda Q: np.broadcast_to([0.0, 1.0], Q.shape).copy(),
        g=lambda Q: (Q[:, 0] ** 2 + Q[:, 1] ** 2 - length**2)[:, None],
        G=lambda Q: 2.0 * Q[:, :, None],
        params={"length": length},
    )


def study(**over) -> dict:
    return {
        "kind": "sweep",
        "problem": "test_grid_instances:drifting_pendulum",
        "methods": [{"k": 2, "s": 2}],
        "t_end": 1,
        "h": [0.1],
        "errors": {"reference": "none"},
        "grid": {"length": {"linspace": [0.5, 2.0, 10_000]}},
    } | over


def test_the_first_instance_off_its_constraint_in_a_grid_of_ten_thousand_is_named_in_one_line():
    with pytest.raises(ConfigError) as err:
        expand_study("s", study())
    message = str(err.value)
    length = OFF_G[0]
    g = (length + 1e-3) ** 2 - length**2  # by hand: q0 = (0, -length - 1e-3)
    assert message.startswith(
        f"studies.s[length={short_h(length)}].problem = 'test_grid_instances:drifting_pendulum': drifting_pendulum: "
        "inconsistent initial data, |g(q0)| = "
    )
    assert f"g_0(q0) = {g:.3e}" in message and "\n" not in message


def test_the_hidden_constraint_of_each_instance_is_checked():
    saved = OFF_G[:]
    OFF_G.clear()
    try:
        with pytest.raises(ConfigError) as err:
            expand_study("s", study())
    finally:
        OFF_G[:] = saved
    length = OFF_HIDDEN[0]
    hidden = 2 * (-length) * 1e-3  # by hand: G(q0)^T p0 = 2 q0 . p0 with q0 = (0, -length), p0 = (length, 1e-3)
    assert str(err.value).startswith(f"studies.s[length={short_h(length)}].problem = ")
    assert f"(G^T M^-1 p0)_0 = {hidden:.3e}" in str(err.value) and "\n" not in str(err.value)


def test_a_consistent_grid_plans_every_instance_with_its_own_identity():
    values = [float(v) for v in VALUES[:50] if v not in OFF_G + OFF_HIDDEN]
    planned = expand_study("s", study(grid={"length": values}))
    assert [i.values["length"] for i in planned.instances] == values
    assert len({i.fingerprint for i in planned.instances}) == len(values)  # the length is a param of each
    assert [i.problem.q0[1] for i in planned.instances] == [-v for v in values]


def test_a_bad_derivative_is_found_in_the_instance_checked_in_full():
    with pytest.raises(ConfigError, match=r"^studies\.s\[length=0\.5\]\.problem = .*grad_U") as err:
        expand_study("s", study(problem="test_grid_instances:wrong_gradient", grid={"length": [0.5, 0.7]}))
    assert "\n" not in str(err.value)


def wrong_gradient(length: float = 1.0) -> hc.Problem:
    """``drifting_pendulum`` with grad_U of the wrong sign."""
    good = drifting_pendulum(length)
    return hc.Problem(
        name="wrong_gradient",
        q0=good.q0,
        p0=good.p0,
        U=good.U,
        grad_U=lambda Q: -good.grad_U(Q),
        g=good.g,
        G=good.G,
        params={"length": length},
    )


def test_a_sweeps_parse_leaves_the_probes_to_the_plan_which_records_each_instances_own():
    import json

    from hbvm_core.fingerprint import problem_probe

    planned = expand_study("s", study(grid={"length": [0.6, 0.9, 1.3]}))
    assert all(inst.probe_pending for inst in planned.instances)  # a dry run never evaluates them
    groups = planned.jobs.groups  # what the plan records, and a worker checks its problem against
    for group, length in zip(groups, [0.6, 0.9, 1.3]):
        own = problem_probe(drifting_pendulum(length))  # built again here: the oracle
        assert json.loads(group["fields"]["problem_probe"]) == own
    assert [json.loads(inst.probe) for inst in planned.instances] == [
        json.loads(g["fields"]["problem_probe"]) for g in groups
    ]
