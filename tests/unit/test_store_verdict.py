"""One predicate of a good store (``storage.store_verdict``): a store of its run's hash whose attrs a reader checks
were edited is 'altered', names the attr, and no reader takes it (tests/workflow/test_reliability_attrs.py runs the
whole recovery through Snakemake)."""

from __future__ import annotations

import os

import pytest
from _stores import group_doc, set_group_doc

from hbvm_workflow.storage import Expected, StoreMismatchError, load_trajectory, store_verdict
from hbvm_workflow.study import expand_study
from hbvm_workflow.worker import solve_batch

STUDY = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}],
    "t_end": 1,
    "h": [0.5],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}


@pytest.fixture
def solved(tmp_path):
    study = expand_study("s", STUDY, results=str(tmp_path / "results"))
    job = next(iter(study.jobs.values()))
    os.makedirs(study.dir)
    shipped = job.as_dict() | {"store": os.path.abspath(job.store), "study_dir": os.path.abspath(study.dir)}
    assert solve_batch([shipped])[0]["status"] == "ok"
    job.store = shipped["store"]
    return study, job


def edit(path: str, change) -> None:
    doc = group_doc(path)
    change(doc["attributes"])
    set_group_doc(path, doc)


EDITS = {
    "structure": (lambda a: a.update(problem_structure="0" * 16), "computed for another problem: its source"),
    "probe": (lambda a: a["problem_probe"]["q0"]["data"].__setitem__(0, 0.5), "computed for another problem: q0"),
    "fingerprint": (lambda a: a.update(problem_fingerprint="f" * 16), "problem fingerprint 'ffff"),
    "h": (lambda a: a.update(h=1.0), "h = 1.0, planned 0.5"),
    "steps": (lambda a: a.update(steps=3), "steps = 3, planned 2"),
}


def test_an_intact_store_of_its_run_is_complete(solved):
    study, job = solved
    inst = study.instance_of(job.combo)
    assert store_verdict(job.store, Expected.of_job(job)).status == "complete"
    assert load_trajectory(job.store, inst.problem, job=job, planned=inst.checked()).q.shape == (3, 2)


@pytest.mark.parametrize("attr", sorted(EDITS))
def test_a_store_with_an_edited_attr_is_altered_and_no_reader_takes_it(solved, attr):
    study, job = solved
    change, why = EDITS[attr]
    edit(job.store, change)
    verdict = store_verdict(job.store, Expected.of_job(job))
    assert verdict.status == "altered" and verdict.why.startswith(why), verdict
    # a batch retried after a lost worker does not take it either: it computes the run again
    shipped = job.as_dict() | {"study_dir": os.path.dirname(os.path.dirname(os.path.dirname(job.store)))}
    assert "raised" not in solve_batch([shipped])[0]
    assert store_verdict(job.store, Expected.of_job(job)).status == "complete"
    edit(job.store, change)
    inst = study.instance_of(job.combo)
    with pytest.raises(StoreMismatchError, match=f"is not the run it claims to be: {why}"):
        load_trajectory(job.store, inst.problem, job=job, planned=inst.checked())


SEALED = {
    "coordinates": lambda a: a.update(coordinates=["u", "v"]),
    "method_entry": lambda a: a["method_entry"].update(k=4),
}


@pytest.mark.parametrize("attr", sorted(SEALED))
def test_an_attr_no_plan_value_checks_is_sealed_damage_refused_by_readers_and_recomputed(solved, attr):
    """The dof names and the method entry are what readers label runs by (``open_trajectory(...).dof``,
    ``select_run(k=...)``); the store's seal finds them edited."""
    from hbvm_workflow.storage import StoreError, open_trajectory

    study, job = solved
    edit(job.store, SEALED[attr])
    verdict = store_verdict(job.store, Expected.of_job(job))
    assert verdict.status == "damaged" and verdict.why == f"attribute {attr} edited after the run was written"
    with pytest.raises(StoreError) as err:
        open_trajectory(job.store)
    assert str(err.value).startswith(f"{job.store}: attribute {attr} edited") and "\n" not in str(err.value)
    assert not os.path.exists(job.store)  # set aside: the solve step computes the run again
    shipped = job.as_dict() | {"study_dir": os.path.dirname(os.path.dirname(os.path.dirname(job.store)))}
    assert "raised" not in solve_batch([shipped])[0]
    assert store_verdict(job.store, Expected.of_job(job)).status == "complete"
    assert list(open_trajectory(job.store).dof.values) == ["x0", "x1"]  # planar_pendulum's coordinates
