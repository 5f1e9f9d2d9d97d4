"""Helpers of the reliability tests: run the real Snakefile in a temporary folder, kill it, check stores.

Every process these helpers start runs in its own session (process group), so a
test can SIGKILL the whole group -- Snakemake, its job scripts and their Dask
workers -- and then check that none of them survived.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
#: the command a user types (README, "Reliability: failures, resuming, determinism"), run in the working folder;
#: after an interruption the user types the same command again, nothing else
SNAKEMAKE = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--configfile", "config.yaml"]

#: a small study of 8 runs (two HBVM methods, four step sizes, the numpy path) for the kill and lock tests
SMALL_STUDY = {
    "problem": "planar_pendulum",
    "backend": "numpy",
    "methods": [{"k": 1, "s": 1}, {"k": 2, "s": 2}],
    "t_end": 5,
    "h0": 0.1,
    "halvings": 3,
    "errors": {"reference": "exact", "norm": 1, "sample": "all"},
}


def env() -> dict:
    """The environment of a workflow run: tests/ on PYTHONPATH (bad_problems:<factory>), Agg plots, one thread."""
    path = os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])
    return dict(
        os.environ,
        PYTHONPATH=path,
        MPLBACKEND="Agg",
        OMP_NUM_THREADS="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )


def write_config(workdir: Path, studies: dict | None = None, text: str | None = None, **extra) -> Path:
    """workdir/config.yaml from a dict of studies (plus top-level keys), or verbatim YAML text."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(text if text is not None else yaml.safe_dump({"studies": studies, **extra}, sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the workflow to the end in workdir (its own session; the group is killed on a timeout)."""
    proc = start(workdir, *args, log=None)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def start(workdir: Path, *args: str, log: Path | None) -> subprocess.Popen:
    """Start the workflow in the background in a new session; output to ``log`` (or a pipe if None)."""
    out = open(log, "w") if log is not None else subprocess.PIPE  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [*SNAKEMAKE, *args],
        cwd=workdir,
        env=env(),
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_until(pred: Callable[[], bool], proc: subprocess.Popen | None, timeout: float, what: str) -> None:
    """Poll ``pred`` every 10 ms; fail if ``proc`` ends first or after ``timeout`` seconds."""
    t0 = time.monotonic()
    while not pred():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended (rc {proc.returncode}) before: {what}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for: {what}")
        time.sleep(0.01)


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (not zombie) processes of the process group ``pgid``."""
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return out


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (a session leader) at once, then wait until every member is gone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)
    t0 = time.monotonic()
    while group_members(proc.pid):
        assert time.monotonic() - t0 < 30, f"processes survived SIGKILL of their group: {group_members(proc.pid)}"
        time.sleep(0.05)


def processes_in(workdir: Path) -> list[psutil.Process]:
    """Live processes whose working directory is workdir (none may survive a kill)."""
    out = []
    for p in psutil.process_iter(["cwd", "status"]):
        try:
            if p.info["cwd"] and Path(p.info["cwd"]) == workdir and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


# --------------------------------------------------------------------------- stores
def final_stores(workdir: Path, study: str) -> list[Path]:
    """Entries at the final path of a run store (runs/<label>/h=<h>.zarr.zip or n=<n>.zarr.zip), complete or not."""
    return sorted((workdir / "results" / study / "runs").glob("*/[hn]=*.zarr.zip"))


def temporaries(workdir: Path, study: str) -> list[Path]:
    """What is in the study's folder of temporaries (results/<study>/.tmp): the only place writers leave any."""
    folder = workdir / "results" / study / ".tmp"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def verify_store(path: Path) -> None:
    """A store at its final path is complete: attrs say so, every row has the step count and holds numbers."""
    import zarr

    from hbvm_workflow.storage import quiet_zarr, read_attrs, saved_rows

    a = read_attrs(str(path))
    assert a is not None and a.get("complete") is True, f"{path}: at the final path but not complete ({a})"
    points, steps = saved_rows(a["steps"], a["save_every"])
    with quiet_zarr():
        g = zarr.open_group(zarr.storage.ZipStore(str(path), mode="r"), mode="r")
        assert g["t"].shape == (points,) and g["q"].shape == (points, a["m"]), path
        assert g["tstep"].shape == (steps,) and g["iterations"].shape == (steps,), path
        for name in ("t", "q", "p", "H", "tstep"):
            assert np.all(np.isfinite(g[name][...])), f"{path}: {name} has unwritten (NaN) rows"
        assert np.all(g["iterations"][...] >= 1), f"{path}: unwritten iteration counts"
        assert g["t"][-1] == a["t_end"] or abs(g["t"][-1] - a["t_end"]) < 1e-9 * a["t_end"], path


def snapshot(paths: list[Path]) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) per store file: an untouched store keeps both."""
    return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths}


# --------------------------------------------------------------------------- errors.csv, timings.csv
def csv_dicts(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))
