"""Interrupted runs and lost workers cost no data; the numbers do not depend on how the study ran.

A small study (planar pendulum, HBVM(1,1) and HBVM(2,2), 8 runs of 50-400 steps)
is built once uninterrupted (the reference, 2 local Dask workers). Then:

- kill chain: the same study is started and its whole process group (Snakemake,
  the job scripts, the Dask workers) SIGKILLed at four points -- early (the first
  runs are being computed, no store yet), middle (some runs stored, others
  running), at the start of the aggregation, and during the plot (rule render
  started: errors.csv written, the figure not yet) -- each time resumed with the same command as the
  first run, nothing else (README, "Reliability: failures, resuming, determinism")::

      snakemake --cores 2

  After every kill: no process survives, every store at a final path verifies
  (complete, every row written), everything unfinished is in results/<study>/.tmp,
  and Snakemake's lock is left. Each resume says it removed the stale lock (no
  process of the killed run holds the run lock), reuses every store the kill left
  (same inode and mtime) and computes only the missing runs; the outputs of a
  killed job are not trusted (recomputed: rerun-incomplete), those of a finished
  one are (the errors.csv of the aggregation that ended before the plot). A dry
  run after a kill only says what a run would do, and removes nothing.
- a live run: while a run waits for Dask workers (an external scheduler that has
  none yet) it holds the lock, and the same command started in the same folder waits
  lock_timeout seconds for it, then stops with one line naming it (never Snakemake's
  LockException and its advice to --unlock), and touches nothing.
- lost worker: with an external ``dask scheduler`` and two ``dask worker``
  processes on 127.0.0.1, one worker (its nanny and process) is SIGKILLed while
  it computes a run; the run is recomputed on the other worker and the study
  completes.
- determinism: the study on 1 local worker.

Every outcome is compared with the reference: errors.csv, table.md and table.tex
byte for byte, whole files. What was measured is in timings.csv: one row per run
in the reference's order, with the wall time and worker stored with the run
(measured once, when it was computed; a resumed study reuses them).
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from _reliability import (
    BIN,
    SMALL_STUDY,
    csv_dicts,
    env,
    final_stores,
    kill_group,
    processes_in,
    snakemake,
    snapshot,
    start,
    temporaries,
    verify_store,
    wait_until,
    write_config,
)

from hbvm_workflow.storage import read_attrs

pytestmark = pytest.mark.slow

STUDY = SMALL_STUDY
NAME = "kill"
RUNS = 8
TIMEOUT = 240
#: two local workers, whatever the solve step would size for so small a study
DASK = {"n_workers": 2}


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-5000:]
    return proc


def same_results(workdir: Path, reference: Path) -> None:
    """errors.csv, table.md and table.tex byte for byte as in the reference run; timings.csv: the same runs
    in the same order, each with the wall time and worker stored with it."""
    res, ref = workdir / "results" / NAME, reference / "results" / NAME
    for name in ("errors.csv", "table.md", "table.tex"):
        assert filecmp.cmp(res / name, ref / name, shallow=False), name
    stores = final_stores(workdir, NAME)
    assert len(stores) == RUNS and not temporaries(workdir, NAME)
    for p in stores:
        verify_store(p)
    # timings.csv: the time and worker stored with each run (measured once, when it was computed)
    timings = csv_dicts(res / "timings.csv")
    key = ("study", "method", "name", "h", "steps", "status")
    assert [[t[k] for k in key] for t in timings] == [[t[k] for k in key] for t in csv_dicts(ref / "timings.csv")]
    assert len(timings) == RUNS
    for t in timings:
        (stored,) = [a for p in stores if (a := read_attrs(str(p)))["label"] == t["method"] and a["h"] == float(t["h"])]
        assert (float(t["wall_s"]), t["worker"], t["backend"]) == (stored["wall_s"], stored["worker"], "numpy")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The study built in one go with `snakemake --cores 2` (2 local Dask workers)."""
    workdir = tmp_path_factory.mktemp("reference")
    write_config(workdir, {NAME: STUDY}, dask=DASK)
    ok(snakemake(workdir, "--cores", "2"))
    assert len({read_attrs(str(p))["worker"] for p in final_stores(workdir, NAME)}) == 2
    return workdir


def snakemake_locks(workdir: Path) -> list[str]:
    """Snakemake's lock files of the working directory."""
    folder = workdir / ".snakemake" / "locks"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


STALE = "removed the stale lock of a run none of whose processes is running"


def test_killed_at_four_points_and_resumed(reference, tmp_path):
    write_config(tmp_path, {NAME: STUDY}, dask=DASK)
    res = tmp_path / "results" / NAME
    runs = lambda: final_stores(tmp_path, NAME)  # noqa: E731
    log = lambda i: (tmp_path / f"run{i}.log").read_text()  # noqa: E731
    points = [
        ("early: the first runs are being computed", lambda: temporaries(tmp_path, NAME) and not runs()),
        ("middle: two runs stored, the others not", lambda: len(runs()) >= 2 and not (res / "solve.json").exists()),
        (
            "the aggregation has started",
            lambda: "rule aggregate:" in log(2) and (res / "solve.json").exists() and not (res / "errors.csv").exists(),
        ),
        (
            "plotting: errors.csv written, the figure not yet",
            lambda: "rule render:" in log(3) and (res / "errors.csv").exists() and not (res / f"{NAME}.png").exists(),
        ),
    ]
    kept: dict[str, tuple[int, int]] = {}  # the stores the last kill left
    manifest_before = None
    for i, (what, reached) in enumerate(points + [("finished", None)]):
        # every run is the same command: the first, and each resume after a kill
        proc = start(tmp_path, "--cores", "2", log=tmp_path / f"run{i}.log")
        try:
            if reached is None:
                assert proc.wait(TIMEOUT) == 0, log(i)[-5000:]
            else:
                wait_until(reached, proc, TIMEOUT, what)
        finally:
            kill_group(proc)  # at once once the point is reached; on any failure, too
        assert not processes_in(tmp_path), f"left running after the kill at {what}"
        if i:  # it found the lock of the run the last kill hit, none of its processes alive, and removed it
            assert STALE in log(i), log(i)[-3000:]
        assert "LockException" not in log(i) and "IncompleteFilesException" not in log(i)

        # this run reused every store the previous kill left, untouched
        now = snapshot(runs())
        assert {p: now.get(p) for p in kept} == kept, f"run {i} ({what}) rewrote a stored run"
        if i in (1, 2):  # the resumed solve step computed exactly the runs that were missing
            solve_log = (tmp_path / "logs" / NAME / "solve.log").read_text()
            assert f"{RUNS} runs: {len(kept)} reused, {RUNS - len(kept)} to compute" in solve_log, solve_log
        if i == 2:
            manifest = json.loads((res / "solve.json").read_text())
            assert len(manifest["computed"]) == RUNS - len(kept) and len(manifest["jobs"]) == RUNS
        if i >= 3:  # killed during or after the aggregation: the runs are not recomputed, the manifest is kept
            assert "rule solve:" not in log(i) and (res / "solve.json").stat().st_mtime_ns == manifest_before

        # what the kill left: every store at a final path is complete, the rest are temporaries
        for p in runs():
            verify_store(p)
        assert all(p.parent.name == ".tmp" for p in temporaries(tmp_path, NAME))
        kept = snapshot(runs())
        state = (len(kept), *((res / f).exists() for f in ("solve.json", "errors.csv", f"{NAME}.png")))
        print(f"run {i}, {what}: {state[0]} stores, manifest {state[1]}, errors.csv {state[2]}, figure {state[3]}")
        expected = {
            0: (state[0], False, False, False),  # any stores: the kill may land just after the first is published
            1: (state[0], False, False, False),
            2: (RUNS, True, False, False),
            3: (RUNS, True, True, False),  # errors.csv written by the killed job, the figure missing
            4: (RUNS, True, True, True),
        }
        assert state == expected[i] and (i != 1 or 2 <= state[0] < RUNS), state
        # the kill left Snakemake's lock; a run that ends normally takes it with it
        assert bool(snakemake_locks(tmp_path)) == (i < 4)
        if i == 3:
            killed_csv = (res / "errors.csv").stat().st_mtime_ns
            # a dry run says what the run would do (break the lock, redo the incomplete plot) and removes nothing
            locks = snakemake_locks(tmp_path)
            dry = snakemake(tmp_path, "-n", "--cores", "2")
            assert "would break the stale lock of a run none of whose processes is running" in dry.stdout
            assert "rule render:" in dry.stdout and "rule aggregate:" not in dry.stdout, dry.stdout[-3000:]
            assert snakemake_locks(tmp_path) == locks
            assert (res / "errors.csv").stat().st_mtime_ns == killed_csv
        if i == 4:  # the killed plot redone; the errors of the aggregation that had finished kept
            assert "rule render:" in log(i) and "rule aggregate:" not in log(i)
            assert (res / "errors.csv").stat().st_mtime_ns == killed_csv
        if (res / "solve.json").exists():
            manifest_before = (res / "solve.json").stat().st_mtime_ns
    assert len(kept) == RUNS
    same_results(tmp_path, reference)


def test_study_on_one_worker_gives_the_same_numbers(reference, tmp_path):
    """Determinism: 1 worker instead of 2, the same errors.csv and tables byte for byte, bit-identical trajectories."""
    write_config(tmp_path, {NAME: STUDY}, dask={"n_workers": 1})
    ok(snakemake(tmp_path, "--cores", "2"))
    assert "LocalCluster (1 worker processes" in (tmp_path / "logs" / NAME / "solve.log").read_text()
    assert len({read_attrs(str(p))["worker"] for p in final_stores(tmp_path, NAME)}) == 1
    same_results(tmp_path, reference)
    import zarr

    for mine, theirs in zip(final_stores(tmp_path, NAME), final_stores(reference, NAME)):
        a, b = (zarr.open_group(zarr.storage.ZipStore(str(p), mode="r"), mode="r") for p in (mine, theirs))
        for var in ("q", "p", "lam", "iterations"):
            assert np.array_equal(a[var][...], b[var][...]), (mine.name, var)


def _session(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True, env=env(), cwd=log.parent
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _scheduler(tmp_path: Path, procs: list) -> str:
    """Start `dask scheduler` on 127.0.0.1 (appended to procs); its address."""
    sched_file = tmp_path / "scheduler.json"
    procs.append(
        _session(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
            + ["--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file)],
            tmp_path / "scheduler.log",
        )
    )
    wait_until(lambda: sched_file.exists() and sched_file.stat().st_size > 0, procs[-1], 60, "the scheduler")
    address = json.loads(sched_file.read_text())["address"]
    assert address.startswith("tcp://127.0.0.1:")
    return address


def test_a_live_run_keeps_its_lock(tmp_path):
    """The same command started while a run is alive (its solve step waits for Dask workers) is refused."""
    procs: list = []
    try:
        address = _scheduler(tmp_path, procs)  # no worker joins: the run waits, holding the lock
        write_config(tmp_path, {NAME: STUDY}, dask={"address": address}, lock_timeout=2)
        run = start(tmp_path, "--cores", "2", log=tmp_path / "run.log")
        procs.append(run)
        solve_log = tmp_path / "logs" / NAME / "solve.log"

        def waiting() -> bool:  # the run holds its lock; its solve step waits for workers
            return solve_log.exists() and f"computing on scheduler {address}" in solve_log.read_text()

        wait_until(lambda: snakemake_locks(tmp_path) and waiting(), run, TIMEOUT, "the run waiting for workers")
        lock = tmp_path / ".snakemake" / "locks"
        before = sorted((p.name, p.stat().st_mtime_ns) for p in lock.iterdir())
        second = snakemake(tmp_path, "--cores", "2")
        out = second.stdout
        # it waits lock_timeout for the run, naming it, then stops: never Snakemake's advice to --unlock
        assert second.returncode != 0 and "LockException" not in out and "--unlock" not in out, out[-3000:]
        holder = f"study {NAME} is being written by pid {run.pid} on {socket.gethostname()} in {tmp_path} since "
        assert any(line.startswith(holder) and "this run waits up to 2 s" in line for line in out.splitlines())
        assert any(line.startswith(holder) and "waited 2 s, this run stops" in line for line in out.splitlines())
        assert "stale lock" not in out and "Traceback" not in out
        assert sorted((p.name, p.stat().st_mtime_ns) for p in lock.iterdir()) == before
        assert run.poll() is None and not final_stores(tmp_path, NAME)
        assert len(list((tmp_path / ".snakemake" / "incomplete").rglob("*"))) == 2  # solve.json and its runs marker
    finally:
        for p in reversed(procs):
            _stop(p)


def test_a_worker_killed_mid_run_costs_nothing(reference, tmp_path):
    """SIGKILL one of two external `dask worker` processes (nanny and worker) while it computes a run."""
    from distributed import Client

    procs: list = []
    client = None
    try:
        address = _scheduler(tmp_path, procs)
        for i in range(2):
            procs.append(
                _session(
                    [str(BIN / "dask"), "worker", address, "--nworkers", "1", "--nthreads", "1"]
                    + ["--host", "127.0.0.1", "--no-dashboard", "--name", f"w{i}"],
                    tmp_path / f"worker{i}.log",
                )
            )
        client = Client(address, timeout=30)
        client.wait_for_workers(2, timeout=60)
        pids = client.run(os.getpid)  # worker address -> pid of the worker process (a child of its nanny)

        write_config(tmp_path, {NAME: STUDY}, dask={"address": address})
        run = start(tmp_path, "--cores", "2", log=tmp_path / "run.log")
        procs.append(run)
        executing: dict = {}

        def busy() -> bool:  # a worker is computing a run whose temporary store exists
            nonlocal executing
            if not temporaries(tmp_path, NAME):
                return False
            running = client.run(lambda dask_worker: [str(ts.key) for ts in dask_worker.state.executing])
            executing = {w: keys for w, keys in running.items() if keys}
            return bool(executing)

        wait_until(busy, run, TIMEOUT, "a worker computing a run")
        victim, keys = next(iter(executing.items()))
        nanny = next(p for p in procs[1:3] if p.pid in _ancestors(pids[victim]))
        killed_at = time.time()
        os.killpg(nanny.pid, signal.SIGKILL)
        nanny.wait(30)
        assert run.wait(TIMEOUT) == 0, (tmp_path / "run.log").read_text()[-5000:]

        survivor = next(w for w in pids if w != victim)
        assert set(client.scheduler_info()["workers"]) == {survivor}
        # the run the lost worker was computing was recomputed on the survivor
        lost = [k for k in keys if k.startswith(f"solve-{NAME}-")]
        assert lost
        paths = final_stores(tmp_path, NAME)
        stored = [read_attrs(str(p)) for p in paths]
        for key in lost:  # a batch of runs: its first run, how many more (dispatch.batch_key)
            label, h, more = re.match(rf"solve-{NAME}-(.+?)-h([^+]+)(?:\+(\d+))?-[0-9a-f]+$", key).groups()
            where = [(a["worker"], p) for a, p in zip(stored, paths) if a["label"] == label and a["h"] == float(h)]
            first = [w for w, _ in where]
            if more is None:  # a batch of one run: recomputed on the survivor, or the victim published it just before
                assert first == [survivor] or (first == [victim] and Path(where[0][1]).stat().st_mtime <= killed_at)
            else:  # a run of the batch finished before the kill keeps its store; the rest are the survivor's
                assert len(first) == 1 and first[0] in (victim, survivor)
        assert {a["worker"] for a in stored} <= {victim, survivor} and survivor in {a["worker"] for a in stored}
        solve_log = (tmp_path / "logs" / NAME / "solve.log").read_text()
        assert f"{RUNS} runs: 0 reused, {RUNS} to compute" in solve_log and f"{RUNS}/{RUNS} " in solve_log
        assert "ERROR" not in solve_log and "FAILED" not in solve_log
        same_results(tmp_path, reference)
    finally:
        if client is not None:
            client.close()
        for p in reversed(procs):
            _stop(p)


def _ancestors(pid: int) -> set[int]:
    import psutil

    proc = psutil.Process(pid)
    return {pid} | {p.pid for p in proc.parents()}


#: 24 runs of 400 steps: cut into batches of 3 or 4 runs for two workers (hbvm_workflow.batching)
BATCHED = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2}],
    "t_end": 20,
    "h": [20 / n for n in range(400, 424)],
    "errors": {"reference": "none"},
}


def test_a_worker_process_killed_mid_batch_costs_nothing(tmp_path):
    """SIGKILL the worker process (not its nanny) of one of two external `dask worker`s after it published a run
    of a batch of several and before the batch ended: the batch is run again (its published runs reused), nothing
    is half-published, errors.csv is the clean run's byte for byte."""
    from distributed import Client

    clean = tmp_path / "clean"
    write_config(clean, {"batch": BATCHED}, dask=DASK)
    assert snakemake(clean, "--cores", "2").returncode == 0
    work = tmp_path / "w"
    work.mkdir()
    procs: list = []
    client = None
    try:
        address = _scheduler(work, procs)
        for i in range(2):
            procs.append(
                _session(
                    [str(BIN / "dask"), "worker", address, "--nworkers", "1", "--nthreads", "1"]
                    + ["--host", "127.0.0.1", "--no-dashboard", "--name", f"w{i}"],
                    work / f"worker{i}.log",
                )
            )
        client = Client(address, timeout=30)
        client.wait_for_workers(2, timeout=60)
        pids = client.run(os.getpid)  # worker address -> pid of its worker process (the nanny's child)
        write_config(work, {"batch": BATCHED}, dask={"address": address})
        run = start(work, "--cores", "2", log=work / "run.log")
        procs.append(run)
        seen: dict = {}

        def mid_batch() -> bool:  # a worker runs a batch of several runs and has published one of them
            running = client.run(lambda dask_worker: [str(ts.key) for ts in dask_worker.state.executing])
            for worker, keys in running.items():
                for key in (k for k in keys if "+" in k):
                    done = sum((read_attrs(str(p)) or {}).get("worker") == worker for p in final_stores(work, "batch"))
                    if done > seen.setdefault((worker, key), done):
                        seen["victim"] = worker
                        return True
            return False

        wait_until(mid_batch, run, TIMEOUT, "a worker that published a run of a batch it is still running")
        published = {p: p.stat().st_mtime_ns for p in final_stores(work, "batch")}
        os.kill(pids[seen["victim"]], signal.SIGKILL)
        assert run.wait(TIMEOUT) == 0, (work / "run.log").read_text()[-5000:]

        stores = final_stores(work, "batch")
        assert len(stores) == len(BATCHED["h"]) and temporaries(work, "batch") == []
        for p in stores:
            verify_store(p)
        assert all(p.stat().st_mtime_ns == m for p, m in published.items())  # what was published stays, unredone
        solve_log = (work / "logs" / "batch" / "solve.log").read_text()
        assert "ERROR" not in solve_log and "FAILED" not in solve_log, solve_log[-3000:]
        assert filecmp.cmp(work / "results/batch/errors.csv", clean / "results/batch/errors.csv", shallow=False)
    finally:
        if client is not None:
            client.close()
        for p in reversed(procs):
            _stop(p)
