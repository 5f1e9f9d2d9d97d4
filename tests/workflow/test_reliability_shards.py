"""The sharded store of a sweep is held to the rule of the run stores: its metadata documents and coordinates are
sealed when it is created, each shard's record names its files. An edited grid value or step size, or a deleted
shard file, is refused by ``open_study`` and ``verify`` in one line naming the store (and the shard and file), and
the same command, plain or ``--forceall``, ends with a store equal to a clean run's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _reliability import env, snakemake, write_config

pytestmark = pytest.mark.slow

SWEEP = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [1.0, 1.9]},
    "methods": [{"k": 1, "s": 1}],
    "t_end": 1,
    "h": [0.1, 0.05],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    "shard_runs": 2,
}
PROBE = """
import json, sys
import numpy as np
from hbvm_workflow.reading import open_study
try:
    ds = open_study("sw").load()
except Exception as exc:
    print("REFUSED", type(exc).__name__, exc)
    sys.exit(0)
print(json.dumps({"theta_dot0": ds.indexes["run"].get_level_values("theta_dot0").tolist(), "h": ds.h.values.tolist(),
                  "status": ds.status.values.tolist(), "q": np.nan_to_num(ds.q.values, nan=-9).tolist()}))
"""


def ok(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "Traceback" not in out, out[-5000:]
    return out


def read(workdir: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=workdir, env=env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def verify(workdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hbvm_workflow", "verify", "results"], cwd=workdir, env=env(), capture_output=True,
        text=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("clean")
    write_config(workdir, {"sw": SWEEP}, select=["sw"])
    ok(snakemake(workdir, "--cores", "1"))
    return workdir


def store(workdir: Path) -> Path:
    return workdir / "results" / "sw" / "runs.zarr"


def edit_grid_value(workdir: Path) -> str:
    """One grid value, 1.0 -> 7.0 in place: the file keeps its size (and its time, below)."""
    doc_path = store(workdir) / "zarr.json"
    text = doc_path.read_text()
    old = '"theta_dot0": 1.0'
    assert text.count(old) == 1, text
    doc_path.write_text(text.replace(old, '"theta_dot0": 7.0'))
    assert json.loads(doc_path.read_text())["attributes"]["combos"][0] == {"theta_dot0": 7.0}
    return "zarr.json: edited after the store was created"


def edit_h(workdir: Path) -> str:
    import zarr

    a = zarr.open_group(str(store(workdir)), mode="r+")["h"]
    a[:] = np.asarray(a[:]) * 2  # valid checksums: only the seal can tell
    return "array h: c/0: edited after the store was created"


def delete_shard_file(workdir: Path) -> str:
    os.remove(store(workdir) / "y" / "c" / "1" / "0" / "0")
    return "array y: shard 1 (y/c/1/0/0): shard file missing"


@pytest.mark.parametrize("forceall", [False, True], ids=["rerun", "forceall"])
@pytest.mark.parametrize("damage", [edit_grid_value, edit_h, delete_shard_file], ids=lambda f: f.__name__)
def test_an_edited_or_incomplete_sharded_store_is_refused_and_made_a_clean_runs(clean, tmp_path, damage, forceall):
    workdir = tmp_path / "w"
    shutil.copytree(clean, workdir, symlinks=True)
    want = read(clean)
    assert not want.startswith("REFUSED") and json.loads(want)["status"] == [0, 0, 0, 0]
    seal = store(workdir) / "zarr.json"
    st = seal.stat()
    what = damage(workdir)
    os.utime(seal, ns=(st.st_atime_ns, st.st_mtime_ns))  # the root document's time kept: only its bytes tell
    got = read(workdir)
    assert got == f"REFUSED StoreError {store(workdir).relative_to(workdir)}: {what}", got
    v = verify(workdir)
    lines = v.stdout.strip().splitlines()
    assert v.returncode == 1 and f"{store(workdir).relative_to(workdir)}: {what}" in lines, v.stdout
    assert lines[-1].endswith(": 1 damaged, 0 missing"), v.stdout
    out = ok(snakemake(workdir, "--cores", "1", *(["--forceall"] if forceall else [])))
    assert "Nothing to be done" not in out, out[-3000:]
    assert read(workdir) == want
    attrs = [json.loads((store(w) / "zarr.json").read_text())["attributes"] for w in (workdir, clean)]
    assert attrs[0] == attrs[1]
    v = verify(workdir)
    assert v.returncode == 0 and v.stdout.strip().endswith(": 0 damaged, 0 missing"), v.stdout
    again = ok(snakemake(workdir, "--cores", "1"))
    assert "Nothing to be done" in again, again[-3000:]
