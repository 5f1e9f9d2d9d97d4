"""Batches of runs for the solve step (hbvm_workflow.batching, worker.solve_batch): every run once, sized by
estimated work, balanced over the workers; one Dask task for many runs without one run's error stopping the rest."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from hbvm_core import get_problem, integrate
from hbvm_core.methods import method_from_entry
from hbvm_workflow.batching import batches
from hbvm_workflow.storage import load_trajectory, read_attrs
from hbvm_workflow.study import expand_study
from hbvm_workflow.worker import solve_batch


def sweep(results, n: int = 60, grid: bool = False):
    """A study of 3 methods x n step sizes (x 2 amplitudes with ``grid``) on the planar pendulum."""
    study = {
        "problem": "planar_pendulum",
        "methods": [{"k": k, "s": 1} for k in (1, 2, 3)],
        "t_end": 1,
        "h": [1.0 / i for i in range(20, 20 + n)],
        "errors": {"reference": "exact", "norm": 1, "sample": "all"},
        "backend": "numpy",  # the batching, not the loop: nothing compiles
    }
    if grid:
        study["grid"] = {"theta_dot0": [0.5, 1.0]}
    return expand_study("sw", study, results=str(results))


def test_every_run_is_in_exactly_one_batch_and_batches_are_balanced(tmp_path):
    jobs = list(sweep(tmp_path, grid=True).jobs.values())
    work = {j.id: j.estimated_seconds() for j in jobs}
    for workers in (1, 2, 8):
        cut = batches(jobs, workers)
        ids = [j.id for b in cut for j in b]
        assert sorted(ids) == sorted(work) and len(ids) == len(set(ids))  # every run, once
        size = min(0.5, sum(work.values()) / (workers * 4))
        loads = [sum(work[j.id] for j in b) for b in cut]
        assert len(cut) >= min(len(jobs), 4 * workers) - 1  # enough batches to keep the workers busy
        assert all(load < size + max(work.values()) for load in loads)  # no batch much above its size
        assert loads[0] >= loads[-1]  # the largest first
    # a run estimated above a batch's size is a batch of its own; a few runs are not merged away
    big = dataclasses.replace(jobs[0], h=1e-5)
    assert [big] in batches([big, *jobs[:10]], 2)
    assert sum(map(len, batches(jobs[:3], 2))) == 3 and batches([], 2) == []


def test_a_batch_writes_each_run_as_solve_job_would_and_one_error_stops_nothing(tmp_path):
    study = sweep(tmp_path, n=4)
    jobs = list(study.jobs.values())
    broken = dataclasses.replace(jobs[1], method={**jobs[1].method, "k": 0})  # HBVM(0, 1): refused
    out = solve_batch([j.as_dict() for j in [jobs[0], broken, *jobs[2:]]])
    assert [r["id"] for r in out] == [j.id for j in jobs]  # in the batch's order
    assert out[1]["raised"] == "ConfigError: k = 0: expected an integer k >= s = 1"  # one line, the run's own error
    assert all(r["status"] == "ok" for i, r in enumerate(out) if i != 1)
    problem = get_problem("planar_pendulum")
    for job in jobs[2:]:
        traj = load_trajectory(job.store, problem, job_hash=job.hash)
        mem = integrate(problem, method_from_entry(job.method), job.h, job.t_end, backend="numpy")
        np.testing.assert_array_equal(traj.q, mem.q)  # bit for bit
    # a batch retried after a lost worker does not compute its published runs again
    before = {j.store: os.stat(j.store).st_mtime_ns for j in jobs[2:]}
    again = solve_batch([j.as_dict() for j in jobs[2:]])
    assert all(r["status"] == "ok" for r in again)
    assert before == {j.store: os.stat(j.store).st_mtime_ns for j in jobs[2:]}
    assert all(read_attrs(j.store)["job_hash"] == j.hash for j in jobs[2:])
