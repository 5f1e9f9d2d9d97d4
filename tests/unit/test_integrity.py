"""Store integrity (hbvm_workflow.storage, hbvm_workflow.verify): checksummed chunks, the chunk record, damage found
before reading (the zip's directory) and while reading (CRC-32C, the zip's CRC-32), named by store and array; older
stores are never trusted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from _stores import Q_CHUNK, group_doc, rewrite, set_group_doc

from hbvm_core import HBVM, get_problem
from hbvm_core.fingerprint import problem_fingerprint
from hbvm_workflow.storage import (
    FORMAT,
    StoreError,
    StoreMismatchError,
    clean_temporaries,
    damage,
    load_trajectory,
    open_errors_at,
    open_trajectory,
    read_attrs,
    store_status,
    write_dataset,
)
from hbvm_workflow.verify import verify
from hbvm_workflow.worker import run_to_store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def planar():
    return get_problem("planar_pendulum")


@pytest.fixture
def store(tmp_path, planar):
    path = str(tmp_path / "study" / "runs" / "m" / "h=0.1.zarr.zip")
    attrs = {"job_hash": "abc", "job_id": "m/h=0.1"}
    res = run_to_store(path, planar, HBVM(2, 2), 0.1, 2.0, attrs=attrs, chunk=8, backend="numpy")
    assert res["status"] == "ok"
    return path


def test_a_store_records_its_chunks_and_checksums_them(store, planar):
    a = read_attrs(store)
    assert a["format"] == FORMAT and a["job_hash"] == "abc" and a["points"] == 21 and a["step_rows"] == 20
    assert a["problem_fingerprint"] == problem_fingerprint(planar)
    assert sorted(a["chunks"]["q"]) == ["c/0/0", "c/1/0", "c/2/0"]  # 21 rows in chunks of 8
    with zipfile.ZipFile(store) as zf:
        assert a["chunks"]["q"]["c/0/0"] == zf.getinfo(Q_CHUNK).file_size
        codecs = [c["name"] for c in json.loads(zf.read("q/zarr.json"))["codecs"]]
    assert codecs == ["bytes", "zstd", "crc32c"]
    assert damage(store) is None and store_status(store, "abc") == "complete"
    assert store_status(store, "abc", problem_fingerprint(planar)) == "complete"
    assert store_status(store, "abc", "another problem") == "altered"  # its hash, another fingerprint: edited


@pytest.mark.parametrize("how", ["delete", "truncate"])
def test_a_missing_or_truncated_chunk_is_found_without_reading(store, planar, how):
    if how == "delete":
        rewrite(store, lambda name, data: None if name == Q_CHUNK else data)
        what = "chunk c/0/0 missing"
    else:
        rewrite(store, lambda name, data: data[:5] if name == Q_CHUNK else data)
        what = "chunk c/0/0 has 5 bytes"
    assert damage(store)[0] == "q" and damage(store)[1].startswith(what)
    assert store_status(store, "abc") == "damaged" and store_status(store, "other") == "stale"
    shutil.copy(store, store + ".copy")
    for read in (lambda: load_trajectory(store, planar), lambda: open_trajectory(store)):
        shutil.copy(store + ".copy", store)
        with pytest.raises(StoreError, match=f"array q: {what}") as err:
            read()
        assert store in str(err.value) and err.value.array == "q"
        assert not os.path.exists(store) and os.path.isfile(err.value.aside)  # set aside: the next run recomputes it


def flip(data: bytes) -> bytes:
    data = bytearray(data)
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


def test_a_truncated_store_file_is_damaged(store, planar):
    with open(store, "r+b") as fh:
        fh.truncate(os.path.getsize(store) // 2)
    assert store_status(store, "abc") == "missing"  # no zip directory: no attrs, not a store of this run
    assert damage(store, {"format": FORMAT, "chunks": {}})[1].startswith("not a readable zip store")
    with pytest.raises(FileNotFoundError, match="no complete trajectory store"):
        load_trajectory(store, planar)


def test_a_byte_changed_in_the_file_fails_the_zips_crc(store, planar):
    with zipfile.ZipFile(store) as zf:
        info = zf.getinfo(Q_CHUNK)
    with open(store, "r+b") as fh:  # the chunk's data start after its local header (30 bytes + name)
        fh.seek(info.header_offset + 30 + len(Q_CHUNK) + info.file_size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(StoreError, match="array q: chunk c/0/0 unreadable") as err:
        load_trajectory(store, planar)
    assert store in str(err.value)


def test_a_corrupt_chunk_of_the_right_size_with_a_new_zip_crc_is_found_by_the_seal(store, planar, capsys):
    rewrite(store, lambda name, data: flip(data) if name == Q_CHUNK else data)  # the zip's CRC-32 recomputed
    assert store_status(store, "abc") == "damaged"  # the zip's directory has another CRC-32 than the seal's
    assert verify([os.path.dirname(os.path.dirname(os.path.dirname(store)))]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{store}: array q: chunk c/0/0 rewritten") and out[-1].endswith("1 damaged, 0 missing")
    with pytest.raises(StoreError, match="array q: chunk c/0/0 rewritten .*set aside as ") as err:
        load_trajectory(store, planar)
    # the reader sets the damaged store aside, into the study's .tmp/damaged: the next run recomputes it
    assert store in str(err.value) and not os.path.exists(store) and os.path.isfile(err.value.aside)
    study = os.path.dirname(os.path.dirname(os.path.dirname(store)))
    assert clean_temporaries(study) == [] and os.path.isfile(err.value.aside)  # kept to be looked at
    assert os.path.dirname(err.value.aside) == os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(store))), ".tmp", "damaged"
    )


def test_a_store_from_an_older_version_is_stale_and_never_loaded(store, planar):
    doc = group_doc(store)
    attrs = doc["attributes"]
    attrs["format"] = "hbvm-trajectory/1"
    for key in ("chunks", "problem_fingerprint"):
        attrs.pop(key)
    set_group_doc(store, doc)
    assert store_status(store, "abc") == "stale" and store_status(store) == "stale"
    assert damage(store)[1].startswith("no integrity record")
    with pytest.raises(StoreMismatchError, match="format 'hbvm-trajectory/1'"):
        load_trajectory(store, planar)


def test_a_store_never_runs_what_its_attrs_name(store, planar, tmp_path):
    """problem_entry / method_entry in the attrs are data: edited to os:system, nothing runs."""
    marker = tmp_path / "marker"
    doc = group_doc(store)
    attrs = {"problem_entry": "os:system", "problem_params": {"command": f"touch {marker}"}, "method_entry": {"k": 2}}
    doc["attributes"].update(attrs)
    set_group_doc(store, doc)
    with pytest.raises(StoreError, match="attribute method_entry added after the run was written"):
        load_trajectory(store, planar)  # an edited store is refused, and nothing it names ran
    assert not marker.exists()


def test_errors_dataset_is_checksummed_and_recorded(tmp_path):
    import xarray as xr

    path = str(tmp_path / "errors.zarr")
    write_dataset(xr.Dataset({"e_s": (("method", "h"), np.ones((2, 3)))}), path)
    assert damage(path) is None and sorted(read_attrs(path)["chunks"]) == ["e_s"]
    assert float(open_errors_at(path).e_s.sum()) == 6.0
    chunk = os.path.join(path, "e_s", "c", "0", "0")
    with open(chunk, "r+b") as fh:
        data = bytearray(fh.read())
        data[0] ^= 0xFF
        fh.seek(0)
        fh.write(data)
    with pytest.raises(StoreError, match=r"errors.zarr: array e_s: c/0/0 changed after the store was written"):
        open_errors_at(path)
    os.remove(chunk)
    with pytest.raises(StoreError, match="errors.zarr: array e_s: chunk c/0/0 missing"):
        open_errors_at(path)


@pytest.mark.parametrize("what", ["attribute", "coordinate", "coordinate units"])
def test_an_edited_errors_dataset_is_refused_naming_it(tmp_path, what):
    """An attribute or a coordinate rewritten through zarr (valid checksums) is found by the store's seal."""
    import xarray as xr
    import zarr

    path = str(tmp_path / "errors.zarr")
    ds = xr.Dataset({"e_s": (("scheme", "h"), np.ones((2, 3)))}, coords={"h": [0.1, 0.05, 0.025]})
    write_dataset(ds.assign_attrs(study="s"), path)
    if what == "attribute":
        doc_path = os.path.join(path, "zarr.json")
        doc = json.load(open(doc_path))
        doc["attributes"]["study"] = "other"
        json.dump(doc, open(doc_path, "w"))
        match = r"errors.zarr: group metadata \(zarr.json\) edited"
    elif what == "coordinate units":
        zarr.open_group(path, mode="r+")["h"].attrs["units"] = "ms"
        match = r"errors.zarr: array h: zarr.json changed after the store was written"
    else:
        zarr.open_group(path, mode="r+")["h"][:] = [1.0, 2.0, 3.0]
        match = r"errors.zarr: array h: (chunk c/0 has \d+ bytes|c/0 changed after the store was written)"
    with pytest.raises(StoreError, match=match) as err:
        open_errors_at(path)
    assert "\n" not in str(err.value)


def test_verify_command(store, tmp_path):
    study = os.path.dirname(os.path.dirname(os.path.dirname(store)))
    cmd = [sys.executable, "-m", "hbvm_workflow", "verify", study]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    ok = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and ok.stdout.strip().endswith("verified 1 store(s) in 1 folder(s): 0 damaged, 0 missing")
    rewrite(store, lambda name, data: None if name == Q_CHUNK else data)
    bad = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert bad.stdout.splitlines() == [
        f"{store}: array q: chunk c/0/0 missing",
        "verified 1 store(s) in 1 folder(s): 1 damaged, 0 missing",
    ]


def test_verify_reads_the_manifest_and_counts_missing_and_damaged_stores(planar, tmp_path, capsys):
    """A study's manifest lists three runs as done: one store intact, one deleted, one with a flipped byte."""
    study = tmp_path / "results" / "s"
    stores = [str(study / "runs" / "m" / f"h={h}.zarr.zip") for h in (0.2, 0.1, 0.05)]
    for path, h in zip(stores, (0.2, 0.1, 0.05)):
        assert (
            run_to_store(path, planar, HBVM(1, 1), h, 1.0, attrs={"job_hash": "x"}, backend="numpy")["status"] == "ok"
        )
    jobs = [{"id": f"m/{i}", "status": "ok", "store": os.path.relpath(p, study)} for i, p in enumerate(stores)]
    jobs.append({"id": "m/failed", "status": "failed", "store": "runs/m/h=0.025.zarr.zip"})  # no store: not missing
    (study / "solve.json").write_text(json.dumps({"study": "s", "jobs": jobs}))
    os.remove(stores[1])
    rewrite(stores[2], lambda name, data: flip(data) if name == Q_CHUNK else data)
    for folder in (study, study.parent):  # a study's folder, or the results folder of its studies
        assert verify([str(folder)]) == 1
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith(f"{stores[2]}: array q: chunk c/0/0 rewritten")
        assert out[1] == f"{stores[1]}: missing (run m/1 of {study / 'solve.json'})"
        assert out[2] == "verified 2 store(s) in 1 folder(s): 1 damaged, 1 missing" and len(out) == 3
    os.remove(stores[2])
    assert verify([str(study)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "verified 1 store(s) in 1 folder(s): 0 damaged, 2 missing"


def test_an_edit_with_its_digest_in_the_seal_record_forged_too_is_found_by_the_zips_comment(store):
    from hbvm_workflow.integrity import digest

    doc = group_doc(store)
    attrs = doc["attributes"]
    attrs["coordinates"] = ["u", "v"]
    attrs["sealed"]["attributes"]["coordinates"] = digest(["u", "v"])  # the record agrees with the edit
    set_group_doc(store, doc)
    assert damage(store) == (None, "zarr.json or the zip's comment (its seal) changed after the run was written")
    assert store_status(store, "abc") == "damaged"
