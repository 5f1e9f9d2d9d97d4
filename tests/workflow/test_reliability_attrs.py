"""A run store whose attrs were edited (arrays and job hash intact) is not the run it claims to be: the same
command sets it aside and recomputes it, whichever step finds it, and the study is never stuck.

One study of three runs through the real Snakefile, then in three of its stores one attr each that a reader
checks against the plan: the recorded problem structure, a recorded probe value, and the step size h. The
same command recomputes exactly those runs (the solve step and the aggregation decide through one predicate,
``storage.store_verdict``), errors.csv is byte for byte the clean run's, ``verify`` is clean, and the command
after that has nothing to do. With the modification times restored to the nanosecond (nothing short of
reading the stores can tell) ``--forceall`` does the same. Attrs no plan value checks (the dof names, the method
entry) are sealed when the store is written: ``list studies`` and ``verify`` count such a store damaged, the
readers refuse it in one line, and the same command recomputes it.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _reliability import env, final_stores, snakemake, write_config
from _stores import group_doc, set_group_doc

pytestmark = pytest.mark.slow

STUDY = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}],
    "t_end": 1,
    "h0": 0.1,
    "halvings": 2,
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}
RUNS = 3


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "Traceback" not in proc.stdout, proc.stdout[-5000:]
    return proc.stdout


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("clean")
    write_config(workdir, {"att": STUDY})
    ok(snakemake(workdir, "--cores", "1"))
    return workdir


def edit_attrs(stores: list[Path], exact_mtime: bool) -> None:
    """One attr each: the structure, one probe value (moved far beyond round-off), h; the job hash kept."""

    def structure(a):
        a["problem_structure"] = "0" * len(a["problem_structure"])

    def probe(a):
        a["problem_probe"]["q0"]["data"][0] += 0.5

    def step(a):
        a["h"] = a["h"] * 2

    for store, change in zip(stores, (structure, probe, step), strict=True):
        st = store.stat()
        doc = group_doc(store)
        change(doc["attributes"])
        set_group_doc(store, doc)
        if exact_mtime:
            os.utime(store, ns=(st.st_atime_ns, st.st_mtime_ns))


def same_as_clean(workdir: Path, clean: Path) -> None:
    assert len(final_stores(workdir, "att")) == RUNS
    a, b = (d / "results" / "att" / "errors.csv" for d in (workdir, clean))
    assert filecmp.cmp(a, b, shallow=False), a.read_text()
    verify = subprocess.run(
        [sys.executable, "-m", "hbvm_workflow", "verify", "results"],
        cwd=workdir,
        env=env(),
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0 and verify.stdout.strip().endswith(": 0 damaged, 0 missing"), verify.stdout


@pytest.mark.parametrize("exact_mtime", [False, True], ids=["touched", "mtime-kept"])
def test_stores_with_edited_attrs_are_recomputed_by_the_same_command(clean, tmp_path, exact_mtime):
    workdir = tmp_path / "w"
    shutil.copytree(clean, workdir, symlinks=True)
    stores = final_stores(workdir, "att")
    assert len(stores) == RUNS
    edit_attrs(stores, exact_mtime)
    out = ok(snakemake(workdir, "--cores", "1", *(["--forceall"] if exact_mtime else [])))
    assert "--forcerun" not in out, out[-3000:]
    for store, attr in zip(stores, ("problem_structure", "problem_probe", "h"), strict=True):  # edit_attrs' order
        rel = store.relative_to(workdir)
        # named by its seal when the command starts (the file changed), else by the solve step against the plan
        sealed = f"damaged store {rel}: attribute {attr} edited after the run was written"
        assert sealed in out or f"{rel} is not the run it claims to be" in out, out[-5000:]
    same_as_clean(workdir, clean)
    again = ok(snakemake(workdir, "--cores", "1"))
    assert "Nothing to be done" in again, again[-3000:]


def test_verify_names_a_store_whose_attrs_disagree_with_its_run(clean, tmp_path):
    workdir = tmp_path / "w"
    shutil.copytree(clean, workdir, symlinks=True)
    stores = final_stores(workdir, "att")
    edit_attrs(stores, exact_mtime=True)
    verify = subprocess.run(
        [sys.executable, "-m", "hbvm_workflow", "verify", "results"],
        cwd=workdir,
        env=env(),
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 1, verify.stdout
    lines = verify.stdout.strip().splitlines()
    for store, attr in zip(stores, ("problem_structure", "problem_probe", "h"), strict=True):  # edit_attrs' order
        assert f"{store.relative_to(workdir)}: attribute {attr} edited after the run was written" in lines, lines
    assert lines[-1].endswith(f": {RUNS} damaged, 0 missing"), verify.stdout  # as list studies counts them


def cli(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hbvm_workflow", *args], cwd=workdir, env=env(), capture_output=True, text=True
    )


def test_attrs_only_readers_use_are_sealed_counted_alike_refused_and_recomputed(clean, tmp_path):
    """The names of the dof (``coordinates``) and the method entry's k: no plan value checks them, the seal does.
    ``list studies`` and ``verify`` count both stores damaged, every reader refuses them in one line naming the
    store, and the same command recomputes them."""
    workdir = tmp_path / "w"
    shutil.copytree(clean, workdir, symlinks=True)
    stores = final_stores(workdir, "att")

    def coordinates(a):
        a["coordinates"] = ["u", "v"]

    def k(a):
        a["method_entry"]["k"] = 4

    for store, change in zip(stores, (coordinates, k)):
        doc = group_doc(store)
        change(doc["attributes"])
        set_group_doc(store, doc)
    listing = cli(workdir, "list", "studies", "--configfile", "config.yaml")
    assert f"att (convergence, planar_pendulum): {RUNS} runs: 1 computed, 0 reused, 0 failed, 2 damaged, 0 missing" in (
        listing.stdout.splitlines()
    ), listing.stdout + listing.stderr
    verify = cli(workdir, "verify", "results")
    lines = verify.stdout.strip().splitlines()
    assert f"{stores[0].relative_to(workdir)}: attribute coordinates edited after the run was written" in lines, lines
    assert f"{stores[1].relative_to(workdir)}: attribute method_entry edited after the run was written" in lines, lines
    assert verify.returncode == 1 and lines[-1].endswith(": 2 damaged, 0 missing"), verify.stdout

    # the readers, on a copy (a reader sets a damaged store aside)
    readers = tmp_path / "r"
    shutil.copytree(workdir, readers, symlinks=True)
    probe = (
        "import sys\nfrom hbvm_workflow.storage import open_trajectory, select_run\n"
        "from hbvm_workflow.reading import open_study\n"
        "try:\n    {call}\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    for call, store in (
        (f"open_trajectory({str(stores[0].relative_to(workdir))!r})", stores[0]),
        ("select_run(open_study('att'), k=4, s=1, n=0)", None),
    ):
        got = subprocess.run(
            [sys.executable, "-c", probe.format(call=call)], cwd=readers, env=env(), capture_output=True, text=True
        )
        out = got.stdout.strip()
        assert out.startswith("DamagedStoreError ") and len(out.splitlines()) == 1, got.stdout + got.stderr
        assert "attribute coordinates edited" in out or "attribute method_entry edited" in out, out
        if store is not None:
            assert str(store.relative_to(workdir)) in out, out

    out = ok(snakemake(workdir, "--cores", "1"))
    assert "--forcerun" not in out, out[-3000:]
    same_as_clean(workdir, clean)
    again = ok(snakemake(workdir, "--cores", "1"))
    assert "Nothing to be done" in again, again[-3000:]
