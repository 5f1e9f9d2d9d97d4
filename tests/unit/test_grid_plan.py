"""A sweep's grid planned as arrays (``hbvm_workflow.grid_plan``, ``study._method_columns``): the same instances,
identities, run ids and hashes as the instance-by-instance route, the hashes those of each run's own hash input, no
problem built per grid value, and a bad instance still named in one line."""

from __future__ import annotations

import copy
import json

import pytest
from user_problems import RODS_IN_SPACE

from hbvm_core.errors import ConfigError
from hbvm_core.fingerprint import problem_probe, problem_structure
from hbvm_workflow import study as study_module
from hbvm_workflow.plan import read_plan, study_record, write_plan
from hbvm_workflow.runs import run_hash
from hbvm_workflow.study import expand_study

#: a pendulum of length L started at x = 1 (off its circle unless L = 1), with a period (for periods: and
#: period_divisions)
OFF_CIRCLE = {
    "name": "off_circle",
    "coordinates": ["x", "y"],
    "params": {"L": 1.0, "grav": 1.0},
    "potential": "grav*y",
    "constraints": ["x**2 + y**2 - L**2"],
    "q0": [1, 0],
    "p0": [0, 0],
    "period": "2*pi*sqrt(L/grav)",
}


def sweep(problem, grid: dict, **over) -> dict:
    return {
        "kind": "sweep",
        "problem": problem,
        "grid": grid,
        "methods": [{"k": 4, "s": 2}],
        "t_end": 0.5,
        "h": [0.1],
        "errors": {"reference": "none"},
    } | over


def conical(**over) -> dict:
    """A summary study over length x gravity of the conical pendulum, (1, 1) (the published problem) among them."""
    return {
        "kind": "convergence",
        "save": "summary",
        "problem": "conical_pendulum",
        "grid": {"length": {"linspace": [0.5, 1.5, 3]}, "gravity": {"linspace": [0.5, 1.5, 5]}},
        "methods": [{"k": 2, "s": 2}, {"k": 4, "s": 2, "h0": 0.1, "halvings": 2}],
        "t_end": 1.0,
        "h": [0.05, 0.1],
        "errors": {"reference": "self"},
    } | over


def both_routes(cfg: dict, tmp_path):
    """The study planned as arrays, and instance by instance."""
    arrays = expand_study("s", copy.deepcopy(cfg), results=str(tmp_path))
    token = study_module.ARRAYS.set(False)
    try:
        one_by_one = expand_study("s", copy.deepcopy(cfg), results=str(tmp_path))
    finally:
        study_module.ARRAYS.reset(token)
    return arrays, one_by_one


CASES = {
    "formula": sweep(RODS_IN_SPACE, {"l1": {"linspace": [0.5, 1.5, 7]}}),
    "formula-ints": sweep(RODS_IN_SPACE, {"l1": {"arange": [1, 5, 1]}}),
    "conical": conical(),
    "conical-periods": conical(t_end=None, h=None, periods=2, methods=[{"k": 2, "s": 2, "period_divisions": [10, 20]}]),
    "formula-period": sweep(
        dict(OFF_CIRCLE, q0=["L", 0]), {"L": [0.5, 1.0, 2.0, 4.0]}, t_end=None, h=None, periods=1,
        period_divisions=[8, 16], errors={"reference": "self"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_arrays_plan_the_instances_runs_and_hashes_of_the_one_by_one_route(case, tmp_path):
    cfg = {k: v for k, v in CASES[case].items() if v is not None}
    arrays, one_by_one = both_routes(cfg, tmp_path)
    unbuilt = [inst for inst in arrays.instances if inst.built is None]
    assert len(unbuilt) >= len(arrays.instances) - 3  # the first, the last and the published one built
    assert all(inst.built is not None for inst in one_by_one.instances)
    fields = ("key", "values", "params", "fingerprint", "structure", "t_end", "period", "where")
    for a, b in zip(arrays.instances, one_by_one.instances, strict=True):
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert arrays.jobs.ids() == one_by_one.jobs.ids()
    assert arrays.jobs.hashes() == one_by_one.jobs.hashes()
    assert arrays.runs_digest() == one_by_one.runs_digest()
    assert json.dumps(study_record(arrays), sort_keys=True) == json.dumps(study_record(one_by_one), sort_keys=True)


@pytest.mark.parametrize("case", ["formula", "conical"])
def test_each_hash_is_that_of_the_runs_own_hash_input_and_each_structure_that_of_its_problem(case, tmp_path):
    arrays = expand_study("s", copy.deepcopy(CASES[case]), results=str(tmp_path))
    jobs = list(arrays.jobs.values())  # Job objects built from the columns
    assert len(jobs) == len(arrays.jobs)
    for job in jobs:  # the hash input as sorted JSON, dumped whole (Job.hash_input), not from a template
        assert job.hash == run_hash(json.dumps(job.hash_input(), sort_keys=True))
    for inst in arrays.instances:  # the problem built now (Instance.problem), its identity computed from it
        assert inst.structure == problem_structure(inst.problem)


def test_a_formula_grid_builds_no_problem_per_value(tmp_path, monkeypatch):
    from hbvm_core import expressions

    calls = []
    build = expressions.Model.problem
    monkeypatch.setattr(expressions.Model, "problem", lambda self, **kw: calls.append(kw) or build(self, **kw))
    planned = expand_study("s", sweep(RODS_IN_SPACE, {"l1": {"linspace": [0.5, 1.5, 1000]}}), results=str(tmp_path))
    assert len(planned.jobs) == 1000 and len(calls) <= 3


@pytest.mark.parametrize(
    "grid, bad",
    [({"L": [1.0, 1.0 + 1e-15, 2.0, 3.0]}, "L=2.0"), ({"L": {"linspace": [1.0, 3.0, 2001]}}, "L=1.001")],
)
def test_the_first_inconsistent_instance_is_named_in_one_line_as_one_by_one(grid, bad, tmp_path):
    cfg = sweep(OFF_CIRCLE, grid)
    messages = []
    for arrays in (True, False):
        token = study_module.ARRAYS.set(arrays)
        try:
            with pytest.raises(ConfigError) as err:
                expand_study("s", copy.deepcopy(cfg), results=str(tmp_path))
        finally:
            study_module.ARRAYS.reset(token)
        messages.append(str(err.value))
    L = float(bad.split("=")[1])
    g = 1.0 - L**2  # by hand: q0 = (1, 0) on a circle of radius L
    assert messages[0] == messages[1]
    assert messages[0].startswith(f"studies.s[{bad}].problem 'off_circle': off_circle: inconsistent initial data")
    assert f"g_0(q0) = {g:.3e}" in messages[0] and "\n" not in messages[0]


def test_a_factorys_own_check_names_the_bad_instance(tmp_path):
    cfg = conical(grid={"length": [0.5, 0.7], "gravity": [1.0, -2.0, 3.0]})
    with pytest.raises(ConfigError) as err:
        expand_study("s", cfg, results=str(tmp_path))
    message = str(err.value)
    assert message.startswith("studies.s[length=0.5,gravity=-2.0].problem = 'conical_pendulum': ")
    assert "gravity = -2.0: expected a positive number" in message and "\n" not in message


def test_the_plan_leaves_a_sweeps_probes_to_the_jobs_that_check_them(tmp_path):
    cfg = {"results": str(tmp_path), "studies": {"s": sweep(RODS_IN_SPACE, {"l1": [0.6, 0.9, 1.3, 1.4]})}}
    from hbvm_workflow.loading import load_studies

    studies = load_studies(copy.deepcopy(cfg))
    path = write_plan(cfg, studies)
    with open(path) as fh:
        text = json.load(fh)["studies"]["s"]
    assert text["instances"]["probe"] == [None] * 4  # nothing evaluated at the parse
    read = read_plan(cfg)["s"]
    assert read.jobs.hashes() == studies["s"].jobs.hashes()
    for inst, group in zip(read.instances, read.jobs.groups, strict=True):
        own = problem_probe(inst.problem)  # the problem built now, its values evaluated: the oracle
        assert json.loads(inst.probe) == own
        assert json.loads(group["fields"]["problem_probe"]) == own


def test_a_shard_computes_the_probes_of_the_problems_its_task_checks_only(tmp_path):
    from hbvm_workflow.shards import _checked_combos

    family = expand_study("s", conical(), results=str(tmp_path))  # a Family takes the instances as arrays
    assert _checked_combos(family, family.instances, [2, 5, 7]) == {2}
    assert all(inst.probe_pending for inst in family.instances[3:])
    own = sweep("test_grid_instances:drifting_pendulum", {"length": [0.6, 0.9, 1.3]}, methods=[{"k": 2, "s": 2}])
    one_by_one = expand_study("s", own, results=str(tmp_path))  # a factory of the user's: a problem per value
    assert _checked_combos(one_by_one, one_by_one.instances, [0, 1, 2]) == {0, 1, 2}
