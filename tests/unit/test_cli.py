"""``python -m hbvm_core kernels warm|info``: which loops warm compiles and what it reports."""

from __future__ import annotations

import pytest

from hbvm_core.__main__ import loop_method, main, warm_tasks
from hbvm_core.methods import HBVM, RATTLE, PolynomialHBVM
from hbvm_core.problems import BUILTIN


def test_warm_covers_every_loop_of_every_built_in_problem():
    tasks = warm_tasks(sorted(BUILTIN), ["fixed-point", "blended"], ["hbvm", "polynomial", "rattle"])
    assert len(tasks) == 4 * len(BUILTIN)
    for name in BUILTIN:
        assert [loop for p, loop in tasks if p == name] == ["fixed-point", "blended", "polynomial", "rattle"]
    assert warm_tasks(["planar_pendulum"], ["blended"], ["rattle", "hbvm"]) == [
        ("planar_pendulum", "blended"),
        ("planar_pendulum", "rattle"),
    ]
    assert loop_method("blended") == HBVM(2, 1, solver="blended")
    assert isinstance(loop_method("polynomial"), PolynomialHBVM) and loop_method("rattle") == RATTLE()


@pytest.mark.slow  # compiles a loop
def test_warm_reports_each_loop_and_info_lists_it(capsys):
    """The unconstrained pendulum has a compiled RATTLE (Stormer-Verlet) loop but no polynomial-multiplier one."""
    assert main(["kernels", "warm", "--problems", "theta_pendulum", "--loops", "polynomial", "rattle", "-j", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[:3] == ["theta_pendulum", "HBVM", "polynomial"] and "no compiled loop" in lines[0]
    assert lines[1].split()[:2] == ["theta_pendulum", "RATTLE"] and "ready in" in lines[1]
    assert main(["kernels", "info"]) == 0
    info = capsys.readouterr().out.splitlines()
    assert any(
        line.strip().startswith("rattle_kernel_") and "(compiled)" in line and "theta_grad_U_kernel" in line
        for line in info[1:]
    )
