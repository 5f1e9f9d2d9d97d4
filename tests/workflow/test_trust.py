"""Results you can trust: a run's identity covers what determines its numbers, stores are checked and are data.

Real ``snakemake --cores 2`` runs of a tiny study (two methods labelled ``v1.tmp-a`` and
``v2.old-b`` -- names that look like temporaries -- three step sizes, tens of steps)
of a user problem ``trustmod:factory`` written into the working folder, U = C y:

- the module edited between two runs of the same command (C = 1 -> 5): every run is
  recomputed (the manifest's ``computed`` lists them) and errors.csv equals a clean run
  with the new module byte for byte; the same command again has nothing to do;
- a clean study damaged by hand -- a deleted chunk of ``q``, a truncated one, a store from
  an older version (no integrity record), a store whose attrs name ``os:system`` with a
  command: ``verify`` exits 1 naming the stores and the array; the workflow names each
  damaged store in one line when it starts and sets it aside, and the solve step
  recomputes exactly those and the old one; nothing the attrs name runs; errors.csv equals
  the clean run; ``verify`` exits 0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _reliability import ROOT, env, snakemake, write_config
from _stores import drop, group_doc, set_group_doc, truncate

pytestmark = pytest.mark.slow

NAME = "trust"
MODULE = """import numpy as np

import hbvm_core as hc

C = {c}


def factory():
    return hc.Problem(
        name="trust",
        q0=np.array([0.0, -1.0]),
        p0=np.array([1.0, 0.0]),
        U=lambda Q: C * Q[:, 1],
        grad_U=lambda Q: np.broadcast_to([0.0, C], Q.shape).copy(),
        g=lambda Q: (np.sum(Q**2, 1) - 1)[:, None],
        G=lambda Q: 2 * Q[:, :, None],
        d2g=lambda Q, V: 2 * np.sum(V**2, 1)[:, None],
    )
"""
STUDY = {
    "problem": "trustmod:factory",
    "backend": "numpy",
    "methods": [{"k": 2, "s": 2, "label": "v1.tmp-a"}, {"k": 3, "s": 3, "label": "v2.old-b"}],
    "t_end": 1,
    "h": [0.1, 0.05],
    "errors": {"reference": "self", "norm": "inf", "sample": 0.1},
}
RUNS = sorted(f"{label}/h={h!r}" for label in ("v1.tmp-a", "v2.old-b") for h in (0.1, 0.05, 0.025))


def setup(workdir: Path, c: float) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "trustmod.py").write_text(MODULE.format(c=c))
    write_config(workdir, {NAME: STUDY}, dask={"n_workers": 1})
    return workdir


def run(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    res = snakemake(workdir, "--cores", "2", *args)
    assert res.returncode == 0, res.stdout[-3000:]
    return res


def manifest(workdir: Path) -> dict:
    return json.loads((workdir / "results" / NAME / "solve.json").read_text())


def errors_csv(workdir: Path) -> bytes:
    return (workdir / "results" / NAME / "errors.csv").read_bytes()


def store(workdir: Path, run_id: str) -> Path:
    label, name = run_id.split("/")
    return workdir / "results" / NAME / "runs" / label / f"{name}.zarr.zip"


def verify(workdir: Path) -> subprocess.CompletedProcess:
    e = env()
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e["PYTHONPATH"]])
    cmd = [sys.executable, "-m", "hbvm_workflow", "verify", f"results/{NAME}"]
    return subprocess.run(cmd, cwd=workdir, env=e, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """A clean run of the study with C = 5."""
    workdir = setup(tmp_path_factory.mktemp("clean"), 5.0)
    run(workdir)
    assert sorted(manifest(workdir)["computed"]) == RUNS
    return workdir


def test_an_edited_user_module_recomputes_its_runs(tmp_path, clean):
    workdir = setup(tmp_path / "edited", 1.0)
    run(workdir)
    before = errors_csv(workdir)
    (workdir / "trustmod.py").write_text(MODULE.format(c=5.0))
    run(workdir)
    assert sorted(manifest(workdir)["computed"]) == RUNS
    assert errors_csv(workdir) != before and errors_csv(workdir) == errors_csv(clean)
    again = run(workdir)  # labels that look like temporaries survive every run
    assert "Nothing to be done" in again.stdout
    assert all(store(workdir, r).is_file() for r in RUNS) and errors_csv(workdir) == errors_csv(clean)


def test_damaged_old_and_tampered_stores(tmp_path, clean):
    workdir = tmp_path / "damaged"
    shutil.copytree(clean, workdir, symlinks=True)
    deleted, truncated, old, tampered = (store(workdir, r) for r in RUNS[:4])
    drop(deleted)
    truncate(truncated, 3)
    for path, change in ((old, "old"), (tampered, "tampered")):
        doc = group_doc(path)
        if change == "old":  # what a store written before the integrity record holds
            doc["attributes"]["format"] = "hbvm-trajectory/1"
            del doc["attributes"]["chunks"]
        else:
            marker = workdir / "marker"
            doc["attributes"].update(problem_entry="os:system", problem_params={"command": f"touch {marker}"})
        set_group_doc(path, doc)

    bad = verify(workdir)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stdout.splitlines()
    assert f"results/{NAME}/runs/{RUNS[0]}.zarr.zip: array q: chunk c/0/0 missing" in lines
    assert f"results/{NAME}/runs/{RUNS[1]}.zarr.zip: array q: chunk c/0/0 has 3 bytes" in bad.stdout
    # the tampered one too: every attribute is sealed (its seal names the one edited)
    assert f"results/{NAME}/runs/{RUNS[3]}.zarr.zip: attribute problem_entry edited after the run was written" in lines
    assert lines[-1] == "verified 7 store(s) in 1 folder(s): 4 damaged, 0 missing"

    again = run(workdir)  # the same command: the manifest is no longer true, so the solve step reruns
    changed = [line for line in again.stdout.splitlines() if "are not intact" in line]
    assert len(changed) == 1 and changed[0].endswith("; the solve step recomputes them"), again.stdout
    # found by the parse (one stat per run against the manifest): the damaged ones, the old and the tampered one
    # (the first three named, in the manifest's order)
    for run_id, what in ((RUNS[2], "changed"), (RUNS[1], "damaged"), (RUNS[0], "damaged")):
        assert f"{run_id} ({what})" in changed[0]
    assert f"study {NAME}: 4 run(s) of results/{NAME}/solve.json are not intact: " in changed[0]
    # the damaged ones (the tampered one too) named when the command starts, one line each, and set aside
    warned = [line for line in again.stdout.splitlines() if "damaged store" in line]
    assert len(warned) == 3, again.stdout
    assert any(f"{RUNS[0]}.zarr.zip: array q: chunk c/0/0 missing; set aside as " in line for line in warned)
    assert any(f"{RUNS[1]}.zarr.zip: array q: chunk c/0/0 has 3 bytes" in line for line in warned)
    assert any(f"{RUNS[3]}.zarr.zip: attribute problem_entry edited" in line for line in warned)
    assert len(list((workdir / "results" / NAME / ".tmp" / "damaged").iterdir())) == 3
    assert sorted(manifest(workdir)["computed"]) == sorted(RUNS[:4])  # the damaged, old and tampered ones, no other
    assert not (workdir / "marker").exists()
    assert errors_csv(workdir) == errors_csv(clean)
    good = verify(workdir)
    assert good.returncode == 0
    assert good.stdout.splitlines() == ["verified 7 store(s) in 1 folder(s): 0 damaged, 0 missing"]


def test_a_results_folder_of_the_older_layout_says_so_and_recomputes(tmp_path, clean):
    """A run store of the folder layout (<run>.zarr, before stores were one file) is removed with one warning
    line and its run computed again; the others are reused."""
    workdir = tmp_path / "legacy"
    shutil.copytree(clean, workdir, symlinks=True)
    new = store(workdir, RUNS[0])
    old = new.with_suffix("")  # <run>.zarr
    old.mkdir()
    (old / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    os.remove(new)
    run(workdir)
    log = (workdir / "logs" / NAME / "solve.log").read_text()
    assert "removed 1 run store(s) in the older folder layout (<run>.zarr)" in log
    assert sorted(manifest(workdir)["computed"]) == [RUNS[0]] and not old.exists() and new.is_file()
    assert errors_csv(workdir) == errors_csv(clean)
