"""A disk that fills while the solve step writes (ENOSPC mid-run), through the real Snakefile.

The results folder is a 6 MB tmpfs mounted for the test (root only; skipped with the reason otherwise).
The free-space check before the solve passes (one run of about 1.3 MB); once the solve job has started,
another process takes all the space left, as a download or another user would. The run's write fails:
the command stops with one line naming the run and the free space, no traceback, nothing published and
no temporary left. Once the space is back, the same command completes and every store verifies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from _reliability import csv_dicts, env, final_stores, snakemake, start, temporaries, wait_until, write_config

from hbvm_workflow.shards import read_record

pytestmark = pytest.mark.slow

NAME = "full"
#: 20 000 steps of HBVM(1,1): a store of about 1.3 MB, written over a few seconds
STUDY = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}],
    "t_end": 20,
    "h": [0.001],
    "chunk": 1024,
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}


@pytest.fixture
def small_results(tmp_path):
    """tmp_path/results on a 6 MB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    results = tmp_path / "results"
    results.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(results)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield results
    finally:
        subprocess.run(["umount", "-l", str(results)], check=False)


def test_a_disk_that_fills_during_the_solve_step(tmp_path, small_results):
    write_config(tmp_path, {NAME: STUDY}, dask={"n_workers": 1})
    run = start(tmp_path, "--cores", "1", log=tmp_path / "run.log")
    solve_log = tmp_path / "logs" / NAME / "solve.log"
    filler = small_results / "filler"
    try:
        wait_until(lambda: solve_log.exists() and "computing on" in solve_log.read_text(), run, 240, "the solve")
        with open(filler, "wb") as fh:  # another process takes all the space left
            try:
                fh.write(b"\0" * shutil.disk_usage(small_results).free)
            except OSError:
                pass
        assert run.wait(240) != 0
    finally:
        if run.poll() is None:
            run.kill()
    out = (tmp_path / "run.log").read_text()
    lines = [
        line for line in out.splitlines() if "DiskFull: run hbvm_k1_s1/h=0.001: no space left on the device" in line
    ]
    assert len(lines) == 1 and " MB free in " in lines[0] and "Traceback" not in out, out[-4000:]
    assert lines[0].endswith("free space, then run the same command again"), lines[0]
    assert not final_stores(tmp_path, NAME) and not temporaries(tmp_path, NAME)

    filler.unlink()  # the space is back: the same command completes
    done = snakemake(tmp_path, "--cores", "1")
    assert done.returncode == 0, done.stdout[-4000:]
    assert len(final_stores(tmp_path, NAME)) == 1 and not temporaries(tmp_path, NAME)
    cmd = [sys.executable, "-m", "hbvm_workflow", "verify", "results"]
    verify = subprocess.run(cmd, cwd=tmp_path, env=env(), capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout


#: 900 runs of 51 or 101 saved points in 18 shards of 50: a store of about 2.9 MB, which 1.5 MB cannot hold
SWEEP = {
    "kind": "sweep",
    "problem": "planar_pendulum",
    "grid": {"theta_dot0": [round(1.0 + 0.001 * i, 3) for i in range(450)]},
    "methods": [{"k": 1, "s": 1}],
    "t_end": 5,
    "h": [0.1, 0.05],
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
    "shard_runs": 50,
}


def test_a_disk_that_fills_during_a_sweep_ends_it_with_one_line_and_the_same_command_completes(tmp_path, small_results):
    """A save: summary sweep on a disk with 1.5 MB free: one line for the study (no Dask traceback, no OSError per
    shard), the shards that fit are kept; once the space is back the same command computes only the others."""
    write_config(tmp_path, {"sw": SWEEP}, select=["sw"])
    filler = small_results / "filler"
    with open(filler, "wb") as fh:  # another process holds all but 1.5 MB
        fh.write(b"\0" * (shutil.disk_usage(small_results).free - 1_500_000))
    run = snakemake(tmp_path, "--cores", "2")
    out = run.stdout
    assert run.returncode == 1, out[-4000:]
    assert "Traceback" not in out and "Compute Failed" not in out and "Errno 28" not in out, out[-4000:]
    lines = [line for line in out.splitlines() if "no space left on the device" in line]
    assert len(lines) == 1 and lines[0].startswith("hbvm: study sw: "), out[-4000:]
    assert lines[0].endswith("free space, then run the same command again") and " MB free in " in lines[0]
    store = str(small_results / "sw" / "runs.zarr")
    kept = sum(read_record(store, slot) is not None for slot in range(18))  # the shards written whole before
    refused = int(lines[0].split("study sw: ")[1].split(" of 18 shards")[0])
    assert kept + refused == 18 and refused > 0, lines[0]

    filler.unlink()  # the space is back: the same command completes, computing only the refused shards
    done = snakemake(tmp_path, "--cores", "2")
    assert done.returncode == 0, done.stdout[-4000:]
    manifest = json.loads((small_results / "sw" / "solve.json").read_text())
    assert (manifest["computed"], manifest["reused"]) == (50 * refused, 50 * kept)
    rows = csv_dicts(small_results / "sw" / "errors.csv")
    assert len(rows) == 900 and {r["status"] for r in rows} == {"ok"}
    cmd = [sys.executable, "-m", "hbvm_workflow", "verify", "results"]
    verify = subprocess.run(cmd, cwd=tmp_path, env=env(), capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout
