"""A shard's grid combinations by problem (shard_worker.Structures): one problem built per problem entry, the
combinations' params handed to integrate_ensemble as arrays in the runs' order; a factory without a Family (a
user's) keeps a problem per combination."""

import numpy as np

from hbvm_core import Problem
from hbvm_workflow.shard_worker import Structures


def _spec(entry: str, values: list[dict]) -> dict:
    return {
        c: {"problem": entry, "params": v, "structure": "", "probe": "", "where": "studies.x", "module_file": ""}
        for c, v in enumerate(values)
    }


def test_one_problem_per_entry_and_the_params_as_arrays_in_run_order():
    values = [{"length": 0.5, "gravity": 1.0}, {"length": 1.0, "gravity": 1.0}, {"length": 2.0, "gravity": 3.0}]
    groups = Structures(_spec("conical_pendulum", values))
    assert set(groups.group.values()) == {0}  # the published instance (1.0, 1.0) too: one family
    combos = np.array([2, 0, 0, 1, 2])
    problem, params = groups.runs(0, combos)
    assert isinstance(problem, Problem)
    np.testing.assert_array_equal(params["length"], [2.0, 0.5, 0.5, 1.0, 2.0])
    np.testing.assert_array_equal(params["gravity"], [3.0, 1.0, 1.0, 1.0, 3.0])


def test_a_factory_without_a_family_builds_a_problem_per_combination():
    values = [{"R": 2.0, "r": 0.5}, {"R": 3.0, "r": 0.5}]
    groups = Structures(_spec("tests.user_problems:bead_on_torus", values))
    problems, params = groups.runs(0, np.array([1, 0]))
    assert params is None
    # each run's own instance, in the runs' order: q0 = (R + r, 0, 0) by the factory's definition
    assert [float(p.q0[0]) for p in problems] == [3.5, 2.5]
