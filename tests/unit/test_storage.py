"""Trajectory stores (hbvm_workflow.storage): chunked Zarr writing, atomic publication, failure markers, reading."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
import xarray as xr
from zarr.storage import ZipStore

from hbvm_core import HBVM, get_problem, integrate
from hbvm_workflow.storage import (
    StoreMismatchError,
    ZarrSink,
    clean_temporaries,
    load_trajectory,
    new_temporary,
    open_trajectory,
    read_attrs,
    read_failure,
    saved_rows,
    store_status,
)
from hbvm_workflow.worker import run_to_store


@pytest.fixture(scope="module")
def planar():
    return get_problem("planar_pendulum")


class CountingSink(ZarrSink):
    """A ZarrSink that records the largest chunk it was handed."""

    def points(self, start, t, q, p):
        self.largest = max(getattr(self, "largest", 0), len(t))
        super().points(start, t, q, p)


@pytest.mark.parametrize("save_every, chunk", [(1, 65536), (3, 7), (4, 5)])
def test_zarr_sink_holds_exactly_the_in_memory_trajectory(tmp_path, planar, save_every, chunk):
    h, t_end = 0.1, 2.5  # 25 steps: with save_every 3 or 4 the last point is an extra one
    mem = integrate(planar, HBVM(2, 2), h, t_end, save_every=save_every, backend="numpy")
    path = str(tmp_path / "run.zarr.zip")
    sink = CountingSink(path, planar, mem.steps, save_every=save_every, chunk=chunk)
    integrate(planar, HBVM(2, 2), h, t_end, save_every=save_every, chunk=chunk, sink=sink, backend="numpy")
    sink.finish({"h": h, "t_end": t_end})
    assert sink.largest <= chunk
    ds = xr.open_zarr(ZipStore(path, mode="r"))
    assert ds.sizes["t"] == saved_rows(25, save_every)[0] == len(mem.t)
    assert ds.sizes["tstep"] == len(mem.tstep) and ds.sizes["dof"] == 2 and ds.sizes["constraint"] == 1
    for name in ("t", "q", "p", "tstep", "lam", "iterations"):
        np.testing.assert_array_equal(ds[name].values, getattr(mem, name))  # bit for bit
    np.testing.assert_array_equal(ds.H.values, mem.H())
    np.testing.assert_array_equal(ds.g.values, mem.g())
    np.testing.assert_array_equal(ds.hc.values, mem.hidden())
    assert ds.q.dims == ("t", "dof") and ds.lam.dims == ("tstep", "constraint")
    assert ds.attrs["complete"] is True and ds.t.values[-1] == pytest.approx(t_end)


def test_long_runs_are_written_in_chunks(tmp_path, planar):
    """Memory stays bounded: the store is written chunk by chunk (several chunk files per array)."""
    path = str(tmp_path / "long.zarr.zip")
    res = run_to_store(path, planar, HBVM(1, 1), 0.01, 10.0, chunk=128, backend="numpy")
    assert res["status"] == "ok" and res["steps"] == 1000
    g = xr.open_zarr(ZipStore(path, mode="r"))
    assert g.q.encoding["chunks"] == (128, 2)
    with zipfile.ZipFile(path) as zf:
        assert sum(n.startswith("q/c/") for n in zf.namelist()) == 8  # 1001 points in chunks of 128
    assert sorted(read_attrs(path)["chunks"]["q"]) == [f"c/{i}/0" for i in range(8)]


def test_run_to_store_is_complete_only_when_published(tmp_path, planar):
    path = str(tmp_path / "runs" / "m" / "h=0.1.zarr.zip")
    assert store_status(path, "abc") == "missing"
    res = run_to_store(path, planar, HBVM(1, 1), 0.1, 1.0, attrs={"job_hash": "abc"}, backend="numpy")
    assert res["status"] == "ok"
    attrs = read_attrs(path)
    assert attrs["complete"] is True and attrs["steps"] == 10 and attrs["h"] == 0.1 and attrs["t_end"] == 1.0
    assert attrs["method"] == "HBVM(1,1)" and attrs["method_attrs"]["k"] == 1 and attrs["versions"]["hbvm"]
    assert attrs["wall_s"] > 0 and attrs["mean_iterations"] > 1
    assert store_status(path, "abc") == "complete"
    assert store_status(path, "other") == "stale"
    assert os.listdir(os.path.dirname(path)) == ["h=0.1.zarr.zip"] and os.listdir(tmp_path / ".tmp") == []


def test_a_killed_run_leaves_nothing_that_looks_complete(tmp_path, planar):
    """A writer killed mid-run leaves only its temporary, which status ignores and cleanup removes."""
    final = str(tmp_path / "runs" / "m" / "h=0.1.zarr.zip")
    tmp = new_temporary(str(tmp_path / ".tmp"), final)
    os.makedirs(os.path.dirname(final))
    sink = ZarrSink(tmp, planar, 10)
    q = np.tile(planar.q0, (3, 1))
    sink.points(0, np.arange(3) * 0.1, q, q)  # 3 of 11 points written, then "killed"
    assert store_status(final) == "missing" and read_attrs(tmp) is None  # no zip directory yet: not a store
    with pytest.raises(RuntimeError, match="wrote 3/11 points"):
        sink.finish({})
    assert clean_temporaries(str(tmp_path)) == [tmp]
    assert os.listdir(os.path.dirname(final)) == [] and os.listdir(tmp_path / ".tmp") == []


def test_a_diverging_run_writes_a_failure_marker_not_a_store(tmp_path, planar):
    path = str(tmp_path / "h=2.0.zarr.zip")
    res = run_to_store(path, planar, HBVM(1, 1), 2.0, 4.0, attrs={"job_hash": "x"}, backend="numpy")
    assert res["status"] == "failed"
    assert res["error"]["step"] == 0 and res["error"]["t"] == 0.0 and res["error"]["increment"] > 0
    assert not os.path.exists(path)
    fail = read_failure(path)
    assert fail["failed"] is True and fail["complete"] is False and fail["job_hash"] == "x"
    assert "step 0" in fail["error"]["message"]
    assert store_status(path, "x") == "failed" and store_status(path, "y") == "stale"
    json.dumps(fail)  # plain JSON


def test_replacing_a_stale_store(tmp_path, planar):
    path = str(tmp_path / "h=0.1.zarr.zip")
    run_to_store(path, planar, HBVM(1, 1), 0.1, 1.0, attrs={"job_hash": "old"}, backend="numpy")
    run_to_store(path, planar, HBVM(1, 1), 0.1, 2.0, attrs={"job_hash": "new"}, backend="numpy")
    assert read_attrs(path)["job_hash"] == "new" and read_attrs(path)["steps"] == 20
    assert sorted(os.listdir(tmp_path)) == [".tmp", "h=0.1.zarr.zip"] and os.listdir(tmp_path / ".tmp") == []


def test_load_trajectory_takes_the_problem_from_the_caller(tmp_path, planar):
    path = str(tmp_path / "h=0.05.zarr.zip")
    attrs = {"job_hash": "abc", "method_entry": {"k": 2, "s": 2}}
    run_to_store(path, planar, HBVM(2, 2), 0.05, 1.0, attrs=attrs, backend="numpy")
    traj = load_trajectory(path, planar, job_hash="abc", method=HBVM(2, 2))
    mem = integrate(planar, HBVM(2, 2), 0.05, 1.0, backend="numpy")
    assert traj.problem is planar and traj.method.name == "HBVM(2,2)"
    assert traj.h == 0.05 and traj.steps == 20
    np.testing.assert_array_equal(traj.y(), mem.y())
    np.testing.assert_array_equal(traj.lam, mem.lam)
    ds = open_trajectory(path)
    assert float(ds.H.max() - ds.H.min()) < 1e-14
    # another problem, another run: one line naming the run, nothing rebuilt from the attrs
    with pytest.raises(StoreMismatchError, match="another problem") as err:
        load_trajectory(path, get_problem("conical_pendulum"))
    assert "\n" not in str(err.value) and path in str(err.value)
    with pytest.raises(StoreMismatchError, match="hash abc, expected xyz"):
        load_trajectory(path, planar, job_hash="xyz")


def test_clean_temporaries_empties_only_the_study_tmp_folder(tmp_path):
    """Names that look like temporaries elsewhere (a label v1.tmp-a, v2.old-b) are never touched."""
    (tmp_path / ".tmp" / "1234-errors.zarr" / "q").mkdir(parents=True)
    (tmp_path / ".tmp" / "5678-h=0.1.zarr.failed.json").write_text("{}")
    (tmp_path / "errors.csv").write_text("kept\n")
    kept = [tmp_path / "runs" / "v1.tmp-a" / "h=0.1.zarr", tmp_path / "runs" / "v2.old-b" / "h=0.1.zarr.old-1234abcd"]
    for p in kept:
        p.mkdir(parents=True)
    removed = clean_temporaries(str(tmp_path))
    assert removed == [
        str(tmp_path / ".tmp" / "1234-errors.zarr"),
        str(tmp_path / ".tmp" / "5678-h=0.1.zarr.failed.json"),
    ]
    assert os.listdir(tmp_path / ".tmp") == [] and all(p.is_dir() for p in kept)
    assert clean_temporaries(str(tmp_path / "nowhere")) == []


def test_a_run_store_is_one_small_file_that_zarr_and_xarray_read(tmp_path):
    """One file per run (no folder, nothing beside it), under 50 kB for a run of a few dozen steps, read back
    by zarr and xarray equal to the trajectory; the array metadata is what zarr itself writes."""
    import zarr

    tethered = get_problem("tethered_satellites")
    path = str(tmp_path / "runs" / "m" / "h=0.1.zarr.zip")
    res = run_to_store(path, tethered, HBVM(6, 2), 0.1, 4.0, chunk=16, backend="numpy")
    assert res["status"] == "ok" and res["steps"] == 40
    assert os.listdir(os.path.dirname(path)) == ["h=0.1.zarr.zip"] and os.path.isfile(path)
    assert os.path.getsize(path) < 50_000
    mem = integrate(tethered, HBVM(6, 2), 0.1, 4.0, backend="numpy")
    group = zarr.open_group(ZipStore(path, mode="r"), mode="r")
    ds = xr.open_zarr(ZipStore(path, mode="r"))
    for name in ("t", "q", "p", "tstep", "lam", "iterations"):
        np.testing.assert_array_equal(group[name][:], getattr(mem, name))
        np.testing.assert_array_equal(ds[name].values, getattr(mem, name))
    np.testing.assert_array_equal(ds.hc.values, mem.hidden())
    # zarr writes the same metadata document for the same array
    ref = zarr.create_array(
        zarr.storage.MemoryStore(),
        shape=group["q"].shape,
        chunks=group["q"].chunks,
        dtype="f8",
        fill_value=np.nan,
        dimension_names=("t", "dof"),
        attributes=dict(group["q"].attrs),
        compressors=(zarr.codecs.ZstdCodec(level=0), zarr.codecs.Crc32cCodec()),
    )
    assert group["q"].metadata.to_dict() == ref.metadata.to_dict()
