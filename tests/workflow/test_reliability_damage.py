"""A byte flipped inside a chunk of a store (size kept) is recovered by the same command, wherever it is found.

Two studies of the kill tests' size through the real Snakefile (``--cores 2``: the two studies are
aggregated side by side in forked processes), then one byte flipped in the ``q`` chunk of one run store
of the first study, as a bit flip on disk or a faulty copy would:

- its modification time restored to the nanosecond, so that nothing short of reading it can tell: the
  same command with ``--forceall`` finds it when the aggregation reads it, names the store and the array
  in one line, sets it aside into ``.tmp/damaged/`` and recomputes that run in the same run;
- its modification time restored to the second only (what ``cp -p`` or ``touch -r`` keep): the next
  command finds it when it starts (the store is not the file the manifest recorded, and reading it in
  full fails its checksum), names it, sets it aside, and the solve step recomputes exactly that run.

Each time: exit 0, no traceback, the other study untouched, errors.csv of both studies byte for byte
those of the clean run, ``verify`` clean, and the same command again has nothing to do.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _reliability import SMALL_STUDY, env, final_stores, snakemake, write_config

pytestmark = pytest.mark.slow

STUDIES = {"dmg": SMALL_STUDY, "other": SMALL_STUDY}
RUNS = 8


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "Traceback" not in proc.stdout and "BrokenProcessPool" not in proc.stdout, proc.stdout[-5000:]
    return proc


def flip_q(store: Path, exact_mtime: bool) -> None:
    """Flip one byte inside the data of the store's q/c/0/0 entry; the file keeps its size and its mtime."""
    st = store.stat()
    data = bytearray(store.read_bytes())
    with zipfile.ZipFile(store) as zf:
        info = zf.getinfo("q/c/0/0")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0x10
    store.write_bytes(bytes(data))
    mtime = st.st_mtime_ns if exact_mtime else st.st_mtime_ns // 10**9 * 10**9
    os.utime(store, ns=(st.st_atime_ns, mtime))
    assert store.stat().st_size == st.st_size


def same_as_clean(workdir: Path, clean: Path) -> None:
    for name in STUDIES:
        assert len(final_stores(workdir, name)) == RUNS
        a, b = (d / "results" / name / "errors.csv" for d in (workdir, clean))
        assert filecmp.cmp(a, b, shallow=False), name
    verify = subprocess.run(
        [sys.executable, "-m", "hbvm_workflow", "verify", "results"],
        cwd=workdir,
        env=env(),
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0 and verify.stdout.strip().endswith(": 0 damaged, 0 missing"), verify.stdout


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("clean")
    write_config(workdir, STUDIES)
    ok(snakemake(workdir, "--cores", "2"))
    return workdir


def damaged_lines(out: str, store: Path) -> list[str]:
    return [line for line in out.splitlines() if f"damaged store {store.relative_to(store.parents[4])}" in line]


def test_a_flip_found_by_the_aggregation_is_recomputed_in_the_same_run(clean, tmp_path):
    workdir = tmp_path / "w"
    shutil.copytree(clean, workdir, symlinks=True)
    store = final_stores(workdir, "dmg")[0]
    flip_q(store, exact_mtime=True)
    run = ok(snakemake(workdir, "--cores", "2", "--forceall"))
    lines = damaged_lines(run.stdout, store)
    assert len(lines) == 1, run.stdout[-5000:]
    assert "array q: chunk c/0/0 unreadable" in lines[0] and "set aside as " in lines[0], lines[0]
    assert lines[0].endswith("now")  # "recomputing run <id> now"
    aside = list((workdir / "results" / "dmg" / ".tmp" / "damaged").iterdir())
    assert len(aside) == 1 and aside[0].name.endswith(store.name)
    assert "failed to aggregate" not in run.stdout
    same_as_clean(workdir, clean)
    again = ok(snakemake(workdir, "--cores", "2"))
    assert "Nothing to be done" in again.stdout and "not intact" not in again.stdout, again.stdout[-3000:]


def test_a_flip_found_when_the_command_starts_is_recomputed(clean, tmp_path):
    workdir = tmp_path / "w"
    shutil.copytree(clean, workdir, symlinks=True)
    store = final_stores(workdir, "dmg")[1]
    others = {p: p.stat().st_mtime_ns for p in final_stores(workdir, "dmg") + final_stores(workdir, "other")}
    flip_q(store, exact_mtime=False)
    run = ok(snakemake(workdir, "--cores", "2"))
    lines = damaged_lines(run.stdout, store)
    assert len(lines) == 1 and "array q: chunk c/0/0 unreadable" in lines[0] and "set aside as " in lines[0], lines
    assert "the solve step recomputes them" in run.stdout
    log = (workdir / "logs" / "dmg" / "solve.log").read_text()
    assert f"{RUNS} runs: {RUNS - 1} reused, 1 to compute" in log, log
    # exactly that run was recomputed: every other store is the file it was
    assert all(p.stat().st_mtime_ns == m for p, m in others.items() if p != store)
    same_as_clean(workdir, clean)
    again = ok(snakemake(workdir, "--cores", "2"))
    assert "Nothing to be done" in again.stdout, again.stdout[-3000:]
