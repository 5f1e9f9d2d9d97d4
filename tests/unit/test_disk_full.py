"""A disk that fills while a run is written (ENOSPC mid-write): nothing published, no temporary left, one line
naming the run and the free space, and the same call completes once space is back.

First on a real filesystem that fills up: a 4 MB tmpfs mounted for the test (root only; skipped with the
reason otherwise), most of it taken by a filler file after the run has started, as another process would;
then, anywhere, by an OSError(ENOSPC) injected into the zip writer halfway through a run.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

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
        run_to_store(store, planar, HBVM(1, 1), H, T_END, attrs=ATTRS, chunk=CHUNK)
    assert len(written) >= 12 and "/c/" in written[10]  # mid-write: chunks were written before the disk filled
    check_refused(info.value, store, study)
    monkeypatch.undo()
    filler.unlink()  # space is back: the same call completes
    assert run_to_store(store, planar, HBVM(1, 1), H, T_END, attrs=ATTRS, chunk=CHUNK)["status"] == "ok"
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
        run_to_store(store, planar, HBVM(1, 1), H, T_END, attrs=ATTRS, chunk=CHUNK)
    check_refused(info.value, store, study)
    monkeypatch.undo()
    assert run_to_store(store, planar, HBVM(1, 1), H, T_END, attrs=ATTRS, chunk=CHUNK)["status"] == "ok"
    assert store_status(store, "x") == "complete"
