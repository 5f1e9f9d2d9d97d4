"""A worker that cannot see what it shares with the host of the solve step (the results folder, the user's
problem module) stops its run with one line naming the host and the path, writing nothing; the kernel cache is
the worker's own, created when it does not exist yet."""

from __future__ import annotations

import os
import platform

import pytest

from hbvm_workflow.study import expand_study
from hbvm_workflow.worker import solve_job

STUDY = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}],
    "t_end": 1,
    "h": [0.5],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}


def planned(results) -> dict:
    """The one run of STUDY as the solve step ships it to a worker (absolute paths, the study's folder)."""
    study = expand_study("s", STUDY, results=str(results))
    job = next(iter(study.jobs.values()))
    return job.as_dict() | {"store": os.path.abspath(job.store), "study_dir": os.path.abspath(study.dir)}


def test_a_worker_that_cannot_see_the_results_folder_stops_naming_host_and_path(tmp_path):
    job = planned(tmp_path / "results")  # the solve step's host has it; this one does not
    study = str(tmp_path / "results" / "s")
    with pytest.raises(RuntimeError) as info:
        solve_job(job)
    msg = str(info.value)
    assert msg.startswith(f"run {job['label']}/h=0.5: host {platform.node()} cannot see the results folder {study} ")
    assert "\n" not in msg and not (tmp_path / "results").exists()  # nothing written


def test_a_kernel_cache_of_the_workers_own_that_does_not_exist_yet_is_created(tmp_path, monkeypatch):
    job = planned(tmp_path / "results")
    os.makedirs(tmp_path / "results" / "s")
    own = tmp_path / "worker-own" / "kernels"  # a new folder, its parent too: nothing shared about it
    monkeypatch.setenv("HBVM_KERNEL_CACHE", str(own))
    assert solve_job(job)["status"] == "ok"
    assert own.is_dir() and os.path.isfile(job["store"])


def test_a_worker_that_cannot_import_the_problem_module_names_where_it_was(tmp_path, monkeypatch):
    job = planned(tmp_path / "results")
    os.makedirs(tmp_path / "results" / "s")
    elsewhere = str(tmp_path / "head" / "no_such_problem_module.py")
    job |= {"problem": "no_such_problem_module:build", "module_file": elsewhere}
    with pytest.raises(RuntimeError) as info:
        solve_job(job)
    msg = str(info.value)
    assert f"host {platform.node()} cannot import the problem module {elsewhere} " in msg and "\n" not in msg
    assert not os.listdir(tmp_path / "results" / "s")
