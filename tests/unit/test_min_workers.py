"""Worker jobs of a SLURMCluster that have not started (``hbvm_workflow.cluster``), without SLURM: the one line
naming them with their squeue state, and ``dask.min_workers`` deciding between going on and stopping. squeue is a
script on PATH printing what a held-back and a refused job look like; the client and cluster are stand-ins with
the attributes dask-jobqueue's have (``cluster.workers``: job name -> job with ``job_id``)."""

from __future__ import annotations

import os
import stat
import threading
from types import SimpleNamespace

import pytest

from hbvm_core.errors import HBVMError
from hbvm_workflow import cluster
from hbvm_workflow.cluster import job_started, squeue_states, worker_shortfall

JOBS = {"SLURMCluster-0": "101", "SLURMCluster-1": "102", "SLURMCluster-2": "103"}
STATES = {"102": "PENDING Resources", "103": "PENDING BeginTime"}
ENDED = {"104": "COMPLETED"}  # a job that ran and ended: its state, the reason "None" left out


@pytest.fixture
def squeue(tmp_path, monkeypatch):
    """A squeue on PATH that lists jobs 102 and 103 as pending and records its arguments."""
    script = tmp_path / "bin" / "squeue"
    script.parent.mkdir()
    script.write_text(
        '#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\n'
        'printf "102 PENDING Resources\\n103 PENDING BeginTime\\n104 COMPLETED None\\n"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return script.parent / "args"


def test_a_job_has_started_when_one_of_its_workers_has_joined():
    assert job_started("SLURMCluster-1", ["SLURMCluster-1"])  # one process per job: the job's name
    assert job_started("SLURMCluster-1", ["SLURMCluster-1-3"])  # several: <job>-<i>
    assert not job_started("SLURMCluster-1", ["SLURMCluster-10", "SLURMCluster-0-1"])


def test_the_jobs_not_started_are_named_and_min_workers_decides():
    joined = ["SLURMCluster-0"]  # one of three jobs of one worker each
    line, stop = worker_shortfall(JOBS, joined, 1, 1, STATES, 60)
    head = "dask.cluster = 'slurm': 2 of 3 worker jobs not started within dask.worker_timeout = 60 s "
    assert (
        line == f"{head}(102 PENDING Resources; 103 PENDING BeginTime); 1 Dask worker(s) joined: going on with "
        "them (dask.min_workers = 1)"
    )
    assert not stop
    line, stop = worker_shortfall(JOBS, joined, 1, 2, STATES, 60)
    assert stop and line.endswith("1 Dask worker(s) joined, dask.min_workers = 2: stopping")
    # min_workers above what the jobs can give: all of those are enough
    assert worker_shortfall({"SLURMCluster-0": "101"}, ["SLURMCluster-0"], 2, 8, {}, 60) == (None, False)
    assert worker_shortfall(JOBS, ["SLURMCluster-0-0", "SLURMCluster-0-1"], 2, 3, STATES, 60)[1]  # 2 < 3
    assert not worker_shortfall(JOBS, ["SLURMCluster-0-0", "SLURMCluster-0-1"], 2, 2, STATES, 60)[1]
    line, stop = worker_shortfall(JOBS, [], 1, 1, {"102": "PENDING Resources"}, 5)
    assert stop and "101 not in squeue; 102 PENDING Resources; 103 not in squeue" in line
    assert worker_shortfall(JOBS, list(JOBS), 1, 3, {}, 5) == (None, False)


def test_squeue_states_are_read_from_squeue(squeue):
    assert squeue_states(["102", "103", "104"]) == STATES | ENDED
    # -t all: an ended job is named by its state (COMPLETED, FAILED, CANCELLED), not as missing
    args = ["-h", "-t", "all", "-j", "102,103,104", "-o", "%i", "%T", "%r"]
    assert squeue.read_text().split() == args  # echo joins the words
    assert squeue_states([]) == {}


def test_without_squeue_its_error_is_said(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    got = squeue_states(["102"])
    assert list(got) == [""] and got[""].startswith("squeue: ")


class _Client:
    def __init__(self, names: list[str], joins: bool):
        self.names, self.joins = names, joins

    def wait_for_workers(self, n: int, timeout: float) -> None:
        if not self.joins or len(self.names) < n:
            raise TimeoutError

    def scheduler_info(self, n_workers: int = 5) -> dict:
        return {"workers": {f"tls://10.0.0.{i}:1": {"name": n} for i, n in enumerate(self.names)}}


def _cluster() -> SimpleNamespace:
    return SimpleNamespace(workers={name: SimpleNamespace(job_id=job) for name, job in JOBS.items()})


def test_too_few_workers_by_the_timeout_stop_the_solve_in_one_line(squeue):
    cfg = {"worker_timeout": 0.01, "min_workers": 2}
    with pytest.raises(HBVMError) as info:
        cluster._wait_for_workers(_Client(["SLURMCluster-0"], joins=False), _cluster(), cfg)
    msg = str(info.value)
    assert "\n" not in msg and "2 of 3 worker jobs not started" in msg and "102 PENDING Resources" in msg
    assert "dask.min_workers = 2: stopping; logs in logs/dask-slurm" in msg


def test_enough_workers_go_on_and_the_jobs_not_started_are_named_once_the_timeout_has_passed(squeue):
    told, done = [], threading.Event()

    def tell(line: str) -> None:
        told.append(line)
        done.set()

    timer = cluster._wait_for_workers(
        _Client(["SLURMCluster-0"], joins=True), _cluster(), {"worker_timeout": 0.05}, tell
    )
    assert timer is not None and done.wait(10)
    assert len(told) == 1 and "2 of 3 worker jobs not started" in told[0] and "going on with them" in told[0]
    # every job started: nothing to say, no timer
    everyone = _Client(list(JOBS), joins=True)
    assert cluster._wait_for_workers(everyone, _cluster(), {"worker_timeout": 0.05}, tell) is None
