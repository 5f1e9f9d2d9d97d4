"""The plan: the studies a parse expanded, written once and read back by the jobs without a new expansion."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import yaml
from user_problems import PENDULUM_EXPRESSIONS

import hbvm_core.fingerprint as fp
from hbvm_core.errors import HBVMError
from hbvm_workflow import plan
from hbvm_workflow.layout import plan_path
from hbvm_workflow.loading import load_studies

ROOT = Path(__file__).resolve().parents[2]

#: a problem given as expressions, with a grid over one of its params (two instances)
GRID = {
    "problem": PENDULUM_EXPRESSIONS,
    "grid": {"length": [0.5, 2.0]},
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}, {"k": 3, "s": 2, "label": "three"}],
    "t_end": 1,
    "h": [0.1, 0.05],
    "errors": {"reference": "self", "norm": 1, "sample": "all"},
}


def shipped(tmp_path) -> dict:
    """The published config with results in ``tmp_path``, and a study of expressions with a grid."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["results"] = str(tmp_path / "results")
    config["studies"] |= {"grid": GRID}
    return config


def same(a, b) -> None:
    """Two expansions of a study are equal in everything the jobs read."""
    assert [j.as_dict() for j in a.jobs.values()] == [j.as_dict() for j in b.jobs.values()]
    assert [j.hash for j in a.jobs.values()] == [j.hash for j in b.jobs.values()]
    assert a.runs_digest() == b.runs_digest()
    assert [asdict(r) for r in a.rows] == [asdict(r) for r in b.rows]
    assert [(m.label, m.name, m.entry, m.k, m.s, m.module, type(m.method)) for m in a.methods] == [
        (m.label, m.name, m.entry, m.k, m.s, m.module, type(m.method)) for m in b.methods
    ]
    assert a.convention == b.convention
    keys = ("key", "values", "params", "fingerprint", "t_end", "period", "structure", "probe")
    assert [[getattr(i, k) for k in keys] for i in a.instances] == [[getattr(i, k) for k in keys] for i in b.instances]
    fields = ("name", "study_kind", "title", "problem", "params", "t_end", "period", "reference", "plot", "cfg")
    for f in (*fields, "dims"):
        assert getattr(a, f) == getattr(b, f), f


def test_the_plan_holds_what_the_expansion_computed(tmp_path):
    config = shipped(tmp_path)
    studies = load_studies(config)
    path = plan.write_plan(config, studies)
    assert path == plan_path(config["results"], plan.plan_key(config))
    read = plan.read_plan(config)
    assert list(read) == list(studies)
    for name in studies:
        same(read[name], studies[name])
    # one study only, and a plan without it: None (the job expands instead)
    assert list(plan.read_plan(config, ["fig3"])) == ["fig3"]
    assert plan.read_plan(config, ["nosuch"]) is None


#: a sharded study (save: summary) numbered by halvings: its rows carry n, read back as columns
SUMMARY = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [0.5, 1.0]},
    "methods": [{"k": 2, "s": 2}, {"k": 3, "s": 1}],
    "t_end": 1,
    "h0": 0.1,
    "halvings": 2,
    "errors": {"reference": "exact", "norm": "inf", "sample": 0.5},
}


def test_a_sharded_study_is_read_back_as_columns_with_its_runs_digest(tmp_path, monkeypatch):
    """The rows of a save: summary study come back as the plan's columns (built as rows when iterated) and its runs
    digest as the parse computed it, without hashing the runs again; the run table (shards.run_table) from the plan
    is the expansion's: the same hashes, step sizes and row labels n."""
    from hbvm_workflow import shards

    config = {"results": str(tmp_path / "results"), "studies": {"sw": SUMMARY}}
    studies = load_studies(config)
    assert studies["sw"].cfg["save"] == "summary"
    plan.write_plan(config, studies)
    for method in ("job_hashes", "hashes"):  # what the runs digest reads
        monkeypatch.setattr(plan.PlannedJobs, method, lambda self: pytest.fail("the runs digested again"))
    read = plan.read_plan(config)["sw"]
    assert all(isinstance(m.rows, plan.PlannedRows) for m in read.methods)
    same(read, studies["sw"])
    a, b = shards.run_table(read), shards.run_table(studies["sw"])
    for f in ("hash", "scheme", "combo", "h", "n", "N", "sample_every"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert sorted(set(a.n.tolist())) == [0, 1, 2] and a.hash.dtype == np.uint64
    assert [int(x) for x in a.hash] == [int(j.hash, 16) for j in studies["sw"].jobs.values()]


def test_a_sharded_study_expanded_as_columns_has_the_runs_of_the_definition(tmp_path):
    """A save: summary study is expanded as columns (no Job per run); each run built from them has the fields of
    the same study expanded run by run (save: trajectory, but for its backend and store) and the hash of its
    definition: the sha256 of json.dumps(hash_input, sort_keys=True), computed here."""
    import hashlib
    import json

    from hbvm_workflow.runs import PlannedJobs, PlannedRows

    config = {"results": str(tmp_path / "results"), "studies": {"sw": SUMMARY}}
    study = load_studies(config)["sw"]
    assert isinstance(study.jobs, PlannedJobs) and all(isinstance(m.rows, PlannedRows) for m in study.methods)
    for job in study.jobs.values():
        text = json.dumps(job.hash_input(), sort_keys=True)
        assert job.hash == hashlib.sha256(text.encode()).hexdigest()[:16], job.id
    by_run = {**SUMMARY, "save": "trajectory"}
    by_run.pop("shard_runs", None)
    other = load_studies({"results": str(tmp_path / "results"), "studies": {"sw": by_run}})["sw"]
    assert list(study.jobs) == list(other.jobs)
    for key, job in study.jobs.items():
        want = other.jobs[key]
        for f in ("label", "problem", "params", "method", "h", "t_end", "run", "combo", "problem_fingerprint"):
            assert getattr(job, f) == getattr(want, f), (key, f)
        assert job.steps == want.steps and job.store == ""
    assert [list(m.rows) for m in study.methods] == [list(m.rows) for m in other.methods]


def test_planned_jobs_reads_every_run_of_every_plan(tmp_path):
    """What verify checks a store against: every job the parse planned, by its hash, whatever form the plan
    recorded its jobs in (groups per method and instance, or one by one)."""
    config = shipped(tmp_path)
    studies = load_studies(config, names=["grid", "table1"])
    plan.write_plan(config, studies)
    planned = plan.planned_jobs(config["results"])
    expected = {job.hash: job.as_dict() for study in studies.values() for job in study.jobs.values()}
    assert len(expected) > 20  # both studies' runs (the grid's 8, table1's 27)
    assert {h: job.as_dict() for h, job in planned.items()} == expected


def test_reading_the_plan_fingerprints_nothing_and_builds_problems_only_when_asked(tmp_path, monkeypatch):
    config = shipped(tmp_path)
    studies = load_studies(config, names=["grid", "table1"])
    plan.write_plan(config, studies)

    def refuse(*args, **kwargs):
        raise AssertionError("a job fingerprinted a problem")

    for name in ("problem_identity", "problem_structure", "problem_probe", "problem_fingerprint"):
        monkeypatch.setattr(fp, name, refuse)
    read = plan.planned_studies(config, ["grid", "table1"])
    grid = read["grid"]
    assert all(inst.built is None for inst in grid.instances)  # nothing built yet
    # built on demand: the instance's own params (length), the same values as the expansion's problem
    for inst, planned in zip(grid.instances, studies["grid"].instances, strict=True):
        assert inst.problem.params == planned.problem.params
        assert (inst.problem.q0 == planned.problem.q0).all()
    assert read["table1"].built_problem.m == studies["table1"].built_problem.m == 2  # the planar pendulum: (x, y)


def test_the_plan_key_is_the_expansion_s_input(tmp_path):
    config = shipped(tmp_path)
    key = plan.plan_key(config)
    # what the expansion does not read: the same plan
    assert plan.plan_key(config | {"select": ["table1"], "dask": {"n_workers": 3}, "retry_failed": True}) == key
    other = json.loads(json.dumps(config))
    other["studies"]["table1"]["title"] = "another title"
    assert plan.plan_key(other) != key
    assert plan.plan_key(config | {"results": str(tmp_path / "elsewhere")}) != key


def test_a_plan_of_another_format_or_config_is_not_read(tmp_path):
    config = shipped(tmp_path)
    plan.write_plan(config, load_studies(config, names=["fig3"]))
    path = Path(plan_path(config["results"], plan.plan_key(config)))
    text = json.loads(path.read_text())
    path.write_text(json.dumps(text | {"format": "hbvm-plan/0"}))
    assert plan.read_plan(config) is None
    path.write_text(json.dumps(text | {"key": "0" * 16}))
    assert plan.read_plan(config) is None
    path.write_text("{not json")
    assert plan.read_plan(config) is None
    path.write_text(json.dumps(text | {"studies": {"fig3": {"name": "fig3"}}}))  # damaged: fields missing
    assert plan.read_plan(config) is None
    # planned_studies expands the config itself then: the same studies
    same(plan.planned_studies(config, ["fig3"])["fig3"], load_studies(config, names=["fig3"])["fig3"])


def test_a_plan_that_cannot_be_written_leaves_nothing(tmp_path, monkeypatch):
    """A full disk while the plan is written: no plan and no temporary; the jobs expand the config themselves."""
    import builtins

    config = shipped(tmp_path)
    studies = load_studies(config, names=["fig3"])
    real = builtins.open

    def full(path, mode="r", *args, **kwargs):
        fh = real(path, mode, *args, **kwargs)
        if "w" in mode:
            fh.close()
            raise OSError(28, "No space left on device")
        return fh

    monkeypatch.setattr(builtins, "open", full)
    assert plan.write_plan(config, studies) is None
    monkeypatch.undo()
    assert list(Path(plan_path(config["results"], "x")).parent.iterdir()) == []
    assert plan.read_plan(config) is None


def test_an_unchanged_plan_is_not_rewritten_and_old_plans_are_pruned(tmp_path):
    config = shipped(tmp_path)
    studies = load_studies(config, names=["fig3"])
    path = Path(plan.write_plan(config, studies))
    before = path.stat().st_mtime_ns
    plan.write_plan(config, studies)
    assert path.stat().st_mtime_ns == before
    for i in range(plan.KEEP + 3):  # plans of other configs
        other = config | {"limits": {"max_steps": 10**9 + i}}
        plan.write_plan(other, studies)
    assert len(list(path.parent.glob("*.json"))) == plan.KEEP
    assert not list(path.parent.glob("*.tmp"))


def test_a_job_refuses_a_plan_that_is_not_the_one_its_rule_was_given(tmp_path):
    config = shipped(tmp_path)
    study = load_studies(config, names=["fig3"])["fig3"]
    plan.check_planned(study, "its runs", study.runs_digest(), study.runs_digest())
    plan.check_planned(study, "its entry", {"h": (0.1, 0.2)}, {"h": [0.1, 0.2]})  # YAML lists, Python tuples
    with pytest.raises(HBVMError, match=r"^study fig3: its plan \(its runs\) changed .*run the workflow again$"):
        plan.check_planned(study, "its runs", "0" * 16, study.runs_digest())


def test_the_aggregate_job_refuses_a_plan_rewritten_under_it(tmp_path, capsys):
    """Another run with another entry for the study wrote the plan after this run's parse: the job stops in one
    line (its rule's param and input marker are what this run planned), writing nothing."""
    import importlib.util
    import sys
    from types import SimpleNamespace

    from hbvm_workflow.layout import runs_marker
    from hbvm_workflow.study import number_config

    config = shipped(tmp_path)
    planned = load_studies(config, names=["fig3"])["fig3"]
    other = json.loads(json.dumps(config))
    other["studies"]["fig3"]["t_end"] = 2000  # the other run's entry (this one's: 1000)
    plan.write_plan(config, load_studies(other, names=["fig3"]))  # the other run's studies, under this config's key
    script = ROOT / "workflow" / "scripts" / "aggregate.py"
    module_spec = importlib.util.spec_from_file_location("hbvm_aggregate_plan_test", script)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    out = SimpleNamespace(**{key: str(tmp_path / f"out.{key}") for key in ("zarr", "csv", "timings")})
    smk = SimpleNamespace(
        wildcards=SimpleNamespace(study="fig3"),
        output=out,
        input=SimpleNamespace(runs=[runs_marker(config["results"], "fig3", planned.runs_digest())]),
        params=SimpleNamespace(numbers=number_config(planned.cfg)),
        log=[str(tmp_path / "aggregate.log")],
        threads=1,
        config=config,
    )
    with pytest.raises(SystemExit):
        module.main(smk)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "study fig3: its plan (its entry) changed" in err[0], err
    assert not any(Path(p).exists() for p in vars(out).values())
    sys.modules.pop("hbvm_aggregate_plan_test", None)


def test_job_groups_and_the_fallback_one_by_one(tmp_path):
    """A method and instance's runs in a row are one group (its shared fields once); when a group's runs are not
    together (A, B, A) the jobs are written one by one; either way the jobs read back are the same runs."""
    from hbvm_workflow.study import expand_study

    study = expand_study("g", GRID | {"backend": "numpy"}, results=str(tmp_path))
    jobs = list(study.jobs.values())
    assert len(jobs) == 2 * 2 * 3  # methods x instances x h = 0.1, 0.05 and 0.025 (the h/2 partners)

    def read_back(record: dict) -> list[tuple]:
        return [(j.id, j.hash, j.h, j.store) for j in plan._jobs_of(record)]

    grouped = plan._job_record(jobs)
    assert "jobs" not in grouped and len(grouped["job_groups"]) == 4  # one per (method, instance)
    assert read_back(grouped) == [(j.id, j.hash, j.h, j.store) for j in jobs]
    first = [j for j in jobs if (j.label, j.combo) == (jobs[0].label, jobs[0].combo)]
    other = [j for j in jobs if j not in first]
    apart = first[:1] + other + first[1:]  # the first group's runs not together
    record = plan._job_record(apart)
    assert "job_groups" not in record and len(record["jobs"]) == len(jobs)
    assert read_back(record) == [(j.id, j.hash, j.h, j.store) for j in apart]
