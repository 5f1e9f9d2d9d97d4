"""A disk that fills while a run is written (ENOSPC mid-write): nothing published, no temporary left, one line
naming the run and the free space, and the same call completes once space is back.

First on a real filesystem that fills up: a 4 MB tmpfs mounted for the test (root only; skipped with the
reason otherwise), most of it taken by a filler file after the run has started, as another process would;
then, anywhere, by an OSError(ENOSPC) injected into the zip writer halfway through a run.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess

import numpy as np
import pytest

from hbvm_core import HBVM, get_problem
from hbvm_workflow import zipstore
from hbvm_workflow.storage import FAILED, load_trajectory, store_status
from hbvm_workflow.worker import DiskFull, run_to_store

#: 10 000 steps of the planar pendulum in chunks of 1024 rows: about 0.6 MB of stores, written chunk by chunk
H, T_END, CHUNK = 1e-3, 10.0, 1024
ATTRS = {"job_id": "m/h=0.001", "job_hash": "x"}


@pytest.fixture(scope="module")
def planar():
    return get_problem("planar_pendulum")


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs at tmp_path/disk, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = shutil.which("mount")
    disk = tmp_path / "disk"
    disk.mkdir()
    if mount is None:
        pytest.skip("no mount command")
    done = subprocess.run([mount, "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def left_behind(study) -> list[str]:
    """Everything in the study's folder of temporaries and at the run's final paths."""
    tmp = study / ".tmp"
    runs = study / "runs" / "m"
    return sorted(os.listdir(tmp) if tmp.is_dir() else []) + sorted(os.listdir(runs) if runs.is_dir() else [])


def check_refused(exc: DiskFull, store: str, study) -> None:
    msg = str(exc)
    assert "\n" not in msg and msg.startswith(f"run m/h=0.001: no space left on the device while writing {store} (")
    assert " MB free in " in msg and msg.endswith("free space, then run the same command again")
    assert left_behind(study) == [] and not os.path.exists(store + FAILED)


def test_a_disk_that_fills_mid_write_keeps_nothing_and_the_same_call_completes_later(small_disk, planar, monkeypatch):
    study = small_disk / "results" / "s"
    store = str(study / "runs" / "m" / "h=0.001.zarr.zip")
    filler = small_disk / "filler"
    written = []
    put = zipstore.ZipStoreWriter._put

    def fill_after_the_first_chunks(self, key, data):  # another process takes the space once the run has started
        written.append(key)
        if len(written) == 12:
            with open(filler, "wb") as fh:
                try:
                    fh.write(b"\0" * shutil.disk_usage(small_disk).free)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
        return put(self, key, data)

    monkeypatch.setattr(zipstore.ZipStoreWriter, "_put", fill_after_the_first_chunks)
    with pytest.raises(DiskFull) as info:
        run_to_store(store, planar, HBVM(1, 1), H, T_END, attrs=ATTRS, chunk=CHUNK, backend="numpy")
    assert len(written) >= 12 and "/c/" in written[10]  # mid-write: chunks were written before the disk filled
    check_refused(info.value, store, study)
    monkeypatch.undo()
    filler.unlink()  # space is back: the same call completes
    assert (
        run_to_store(store, planar, HBVM(1, 1), H, T_END, attrs=ATTRS, chunk=CHUNK, backend="numpy")["status"] == "ok"
    )
    assert store_status(store, "x") == "complete" and load_trajectory(store, planar).q.shape == (10001, 2)
    assert sorted(os.listdir(study / ".tmp")) == []


def test_an_injected_enospc_mid_write_keeps_nothing(tmp_path, planar, monkeypatch):
    study = tmp_path / "results" / "s"
    store = str(study / "runs" / "m" / "h=0.001.zarr.zip")
    put = zipstore.ZipStoreWriter._put
    calls = []

    def full_at_the_20th_entry(self, key, data):
        calls.append(key)
        if len(calls) == 20:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return put(self, key, data)

    monkeypatch.setattr(zipstore.ZipStoreWriter, "_put", full_at_the_20th_entry)
    with pytest.raises(DiskFull) as info:
        run_to_store(store, planar, HBVM(1, 1), H, T_END, attrs=ATTRS, chunk=CHUNK, backend="numpy")
    check_refused(info.value, store, study)
    monkeypatch.undo()
    assert (
        run_to_store(store, planar, HBVM(1, 1), H, T_END, attrs=ATTRS, chunk=CHUNK, backend="numpy")["status"] == "ok"
    )
    assert store_status(store, "x") == "complete"


# --------------------------------------------------------------------------- a shard of a save: summary study
SWEEP = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [0.5, 1.0, 1.5]},
    "methods": [{"k": 1, "s": 1}],
    "t_end": 1,
    "h": [0.1, 0.05],
    "errors": {"reference": "exact", "norm": "inf", "sample": 0.5},
    "shard_runs": 2,
}


@pytest.fixture
def solve_script():
    """The solve step's dispatch of its tasks (hbvm_workflow.dispatch)."""
    from hbvm_workflow import dispatch

    return dispatch


def test_a_shard_the_file_system_refuses_is_returned_as_data_and_said_once_for_the_study(
    tmp_path, monkeypatch, solve_script
):
    """ENOSPC while a shard is written: the task returns the error instead of raising (so Dask neither retries nor
    logs it), the shard keeps no record and no temporary; the solve step's line for the study names the shards, the
    store and the free space, in one line. Another OSError (read-only) is named with its own message."""
    import platform

    from hbvm_workflow import shard_worker, shards
    from hbvm_workflow.layout import shard_record
    from hbvm_workflow.study import expand_study

    study = expand_study("sw", SWEEP, results=str(tmp_path / "results"))
    os.makedirs(study.dir, exist_ok=True)
    table, todo, _ = shards.prepare(study, False, logging.getLogger("test"))
    assert [s.slot for s in todo] == [0, 1, 2]
    path = shards.shard_store(study.results, "sw")
    spec = shards.shard_spec(study, table, todo[0]) | {"compute": [], "sources": []}  # nothing to integrate
    record = shard_record(path, 0)
    n, nu = 2, table.nu
    rows = {"counts": np.zeros((n, 6), np.int64), "scalars": np.zeros((n, 1 + 2 * nu)), "t": np.zeros((n, table.S))}
    shards.write_shard(path, 0, 0, rows | {"y": np.zeros((n, table.S, 2 * table.m))}, "earlier", {})
    assert shards.read_record(path, 0) is not None  # an earlier record: emptied before the shard is written
    write = shards.write_shard

    def full_disk(store, slot, start, arrays, digest, rec, partial=None):  # the record's temporary cut short
        with open(f"{shard_record(store, slot)}.{os.getpid()}.tmp", "w") as fh:
            fh.write("{")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(store, "y", "c", "0"))

    monkeypatch.setattr(shard_worker, "write_shard", full_disk)
    res = shard_worker.solve_shard(spec)
    assert res == {
        "slot": 0,
        "host": platform.node(),
        "oserror": {"errno": errno.ENOSPC, "message": f"No space left on device: {path}/y/c/0"},
    }
    # no record (the shard's group without attributes) and no temporary left beside it
    assert shards.read_record(path, 0) is None and os.listdir(os.path.dirname(record)) == ["zarr.json"]
    monkeypatch.setattr(shard_worker, "write_shard", write)

    refused = [res, res | {"slot": 2}]
    line = solve_script.describe_oserrors(study, refused, 3)
    head = f"study sw: 2 of 3 shards (shards 0, 2; on {platform.node()}): no space left on the device while writing "
    assert "\n" not in line and line.startswith(f"{head}{path} (") and f" MB free in {study.dir});" in line
    assert line.endswith("free space, then run the same command again")
    read_only = {"slot": 1, "host": "b", "oserror": {"errno": errno.EROFS, "message": "Read-only file system"}}
    line = solve_script.describe_oserrors(study, [res, read_only], 3)
    assert line.startswith(f"study sw: 2 of 3 shards (shards 0, 1; on b, {platform.node()}) could not be written to")
    assert "[Errno 30] Read-only file system" in line and "\n" not in line
