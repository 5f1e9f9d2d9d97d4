"""One writer per study, a run's lock kept while any process of it lives, clean failures of the solve step.

The study of the kill tests (8 small runs), through the real Snakefile:

- two working directories with the same ``results:`` started together: both finish, the second
  waiting for the first (results/<study>/.snakemake.lock, held by the Snakemake run that builds the
  study), every published store verifies, errors.csv is byte for byte that of a clean run;
- a study another process is writing: with ``lock_timeout: 1`` the solve step stops with one line
  naming the holder (pid, host, working directory);
- an orphaned solve job: only the Snakemake main process is SIGKILLed while its solve job waits for
  Dask workers; the same command is refused (Snakemake's lock is kept, one line says why) while the
  orphan lives; once it has finished, the same command resumes and errors.csv is that of a clean run;
- an unreachable scheduler: the solve step fails in seconds with one line naming the address.
"""

from __future__ import annotations

import filecmp
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from _reliability import (
    BIN,
    SMALL_STUDY,
    env,
    final_stores,
    kill_group,
    processes_in,
    snakemake,
    start,
    temporaries,
    verify_store,
    wait_until,
    write_config,
)

from hbvm_workflow.layout import lock_path
from hbvm_workflow.locks import study_lock

pytestmark = pytest.mark.slow

STUDY = SMALL_STUDY
NAME = "locks"
RUNS = 8
TIMEOUT = 240
DASK = {"n_workers": 1}
STALE = "removed the stale lock of a run none of whose processes is running"


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-5000:]
    return proc


def same_errors(root: Path, reference: Path) -> None:
    """Every store at a final path verifies, no temporary is left, errors.csv as in the clean run."""
    stores = final_stores(root, NAME)
    assert len(stores) == RUNS and not temporaries(root, NAME)
    for p in stores:
        verify_store(p)
    res, ref = root / "results" / NAME / "errors.csv", reference / "results" / NAME / "errors.csv"
    assert filecmp.cmp(res, ref, shallow=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("clean")
    write_config(workdir, {NAME: STUDY}, dask=DASK)
    ok(snakemake(workdir, "--cores", "2"))
    return workdir


def test_two_working_directories_share_one_study(reference, tmp_path):
    shared = tmp_path / "shared"
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        write_config(d, {NAME: STUDY}, dask=DASK, results=str(shared / "results"))
    procs = [start(d, "--cores", "2", log=d / "run.log") for d in dirs]
    try:
        for d, p in zip(dirs, procs):
            assert p.wait(TIMEOUT) == 0, (d / "run.log").read_text()[-5000:]
    finally:
        for p in procs:
            kill_group(p)
    same_errors(shared, reference)
    logs = [(d / "run.log").read_text() for d in dirs]
    assert not any("Traceback" in log for log in logs)
    # one of them waited for the other, named by its pid and working directory
    waited = [
        i
        for i, log in enumerate(logs)
        if f"study {NAME} is being written by pid {procs[1 - i].pid} on " in log
        and "waits up to 600 s" in log
        and f" in {dirs[1 - i]} since " in log
    ]
    assert len(waited) == 1, [log[-2000:] for log in logs]


def test_a_study_written_elsewhere_stops_naming_the_holder(tmp_path):
    write_config(tmp_path, {NAME: STUDY}, dask=DASK, lock_timeout=1)
    with study_lock(lock_path(str(tmp_path / "results"), NAME), NAME):
        proc = snakemake(tmp_path, "--cores", "2")
    out = proc.stdout
    assert proc.returncode != 0 and "Traceback" not in out, out[-3000:]
    holder = f"study {NAME} is being written by pid {os.getpid()} on {socket.gethostname()} in {os.getcwd()} since "
    waits = [line for line in out.splitlines() if line.startswith(holder) and "this run waits up to 1 s" in line]
    stops = [line for line in out.splitlines() if line.startswith(holder) and "waited 1 s, this run stops" in line]
    assert len(waits) == 1 and len(stops) == 1, out[-3000:]
    assert "--unlock" not in out and "LockException" not in out and not final_stores(tmp_path, NAME)


def test_an_orphaned_solve_job_keeps_the_lock_until_it_ends(reference, tmp_path):
    procs: list[subprocess.Popen] = []
    try:
        sched_file = tmp_path / "scheduler.json"
        procs.append(
            subprocess.Popen(
                [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
                + ["--scheduler-file", str(sched_file)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env(),
                start_new_session=True,
            )
        )
        wait_until(lambda: sched_file.exists() and sched_file.stat().st_size > 0, procs[-1], 60, "the scheduler")
        address = json.loads(sched_file.read_text())["address"]
        write_config(tmp_path, {NAME: STUDY}, dask={"address": address}, lock_timeout=2)
        run = start(tmp_path, "--cores", "2", log=tmp_path / "run0.log")
        procs.append(run)
        solve_log = tmp_path / "logs" / NAME / "solve.log"
        wait_until(
            lambda: solve_log.exists() and "computing on scheduler" in solve_log.read_text(),
            run,
            TIMEOUT,
            "the solve job waiting for workers",
        )
        os.kill(run.pid, signal.SIGKILL)  # only Snakemake: its solve job lives on
        run.wait(30)
        assert processes_in(tmp_path), "the solve job should outlive its Snakemake"

        refused = snakemake(tmp_path, "--cores", "2")
        out = refused.stdout
        # waits lock_timeout for the orphan, naming it, then stops: never Snakemake's advice to --unlock
        assert refused.returncode != 0 and "LockException" not in out and "--unlock" not in out, out[-3000:]
        assert "Traceback" not in out and "stale lock" not in out, out[-3000:]
        waits = [line for line in out.splitlines() if "this run waits up to 2 s (lock_timeout)" in line]
        stops = [line for line in out.splitlines() if "waited 2 s, this run stops and changes nothing" in line]
        assert len(waits) == 1 and f"study {NAME} is being written by pid " in waits[0], out[-3000:]
        assert len(stops) == 1 and f" on {socket.gethostname()} in {tmp_path} since " in stops[0], out[-3000:]

        # a worker joins: the orphan computes every run, writes the manifest and ends
        procs.append(
            subprocess.Popen(
                [str(BIN / "dask"), "worker", address, "--nworkers", "1", "--nthreads", "1"]
                + ["--host", "127.0.0.1", "--no-dashboard"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env(),
                start_new_session=True,
            )
        )
        t0 = time.monotonic()
        while processes_in(tmp_path):
            assert time.monotonic() - t0 < TIMEOUT, "the orphaned solve job did not end"
            time.sleep(0.1)
        resumed = ok(snakemake(tmp_path, "--cores", "2"))
        assert STALE in resumed.stdout and "LockException" not in resumed.stdout
        same_errors(tmp_path, reference)
    finally:
        for p in reversed(procs):
            kill_group(p)


def test_a_second_run_in_the_same_folder_waits_for_its_study_and_not_for_another(reference, tmp_path):
    """Two studies in one working directory: a second run of the study being built waits for the first (one
    line naming it) and then finishes; a run of the other study, started meanwhile, is told nothing and
    finishes beside it. Snakemake's LockException (and its advice to --unlock) never shows."""
    write_config(tmp_path, {NAME: STUDY, "other": STUDY}, dask=DASK)

    def only(name: str) -> tuple[str, ...]:
        return ("--cores", "1", "--config", f"select=[{name}]")

    first = start(tmp_path, *only(NAME), log=tmp_path / "first.log")
    again = None
    try:
        solve_log = tmp_path / "logs" / NAME / "solve.log"
        wait_until(lambda: solve_log.exists(), first, TIMEOUT, "the first run's solve job")
        again = start(tmp_path, *only(NAME), log=tmp_path / "again.log")
        other = ok(snakemake(tmp_path, *only("other")))
        assert first.wait(TIMEOUT) == 0, (tmp_path / "first.log").read_text()[-3000:]
        assert again.wait(TIMEOUT) == 0, (tmp_path / "again.log").read_text()[-3000:]
    finally:
        for proc in (first, again):
            if proc is not None:
                kill_group(proc)
    again = subprocess.CompletedProcess(again.args, 0, (tmp_path / "again.log").read_text(), "")
    for out in (other.stdout, again.stdout):
        assert "LockException" not in out and "--unlock" not in out and "Traceback" not in out, out[-3000:]
    assert "is being written by" not in other.stdout and "refused" not in other.stdout, other.stdout[-3000:]
    waited = [line for line in again.stdout.splitlines() if "this run waits up to 600 s (lock_timeout)" in line]
    assert len(waited) == 1 and f"study {NAME} is being written by pid {first.pid} on " in waited[0], again.stdout
    same_errors(tmp_path, reference)


def test_an_unreachable_scheduler_fails_in_seconds(tmp_path):
    address = "tcp://127.0.0.1:1"
    write_config(tmp_path, {NAME: STUDY}, dask={"address": address})
    t0 = time.monotonic()
    proc = snakemake(tmp_path, "--cores", "2", timeout=60)
    elapsed = time.monotonic() - t0
    out = proc.stdout
    assert proc.returncode != 0 and elapsed < 15, (elapsed, out[-3000:])
    lines = [line for line in out.splitlines() if line.startswith("hbvm: ")]
    assert len(lines) == 1 and lines[0].startswith(f"hbvm: dask.address = '{address}': cannot reach"), out[-3000:]
    assert "Traceback" not in out
    assert "Traceback" in (tmp_path / "logs" / NAME / "solve.log").read_text()  # the details, in the log
