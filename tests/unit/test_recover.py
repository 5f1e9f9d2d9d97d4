"""hbvm_workflow.recover: Snakemake's lock is broken only when no process of the run that took it is alive.

The lock files and incomplete markers are written by Snakemake's own FilePersistence (what a
killed run leaves); the processes of the earlier run are real ones holding the run lock: a child
that holds it, one that was SIGKILLed while holding it, and the grandchild it forked (an orphan).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from snakemake.cli import get_argument_parser
from snakemake.persistence.file import FilePersistence

from hbvm_workflow import locks, recover

OUT = "results/s/errors.csv"


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Iterator[Path]:
    """A working directory as a killed run leaves it: an output half-written, its marker, the lock."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(locks, "_held", {})  # this test process holds no run lock of its own yet
    Path(OUT).parent.mkdir(parents=True)
    Path(OUT).write_text("half")
    pers = FilePersistence(path=tmp_path / ".snakemake")
    pers._write_locks("input", ["results/s/solve.json"])
    pers._write_locks("output", [OUT])
    pers._mark_incomplete(OUT, None)
    yield tmp_path
    release()


def release() -> None:
    """Let go of the run lock this (test) process took as a run's."""
    for fd in locks._held.values():
        os.close(fd)
    locks._held.clear()


def lock_files(workdir: Path) -> list[str]:
    folder = workdir / ".snakemake" / "locks"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


HOLDER = """
import os, sys, time
sys.path.insert(0, {root!r})
from hbvm_workflow.locks import hold_run_lock
hold_run_lock(".snakemake")
if {fork}:
    if os.fork() == 0:  # the orphan: holds the inherited lock after its parent is killed
        time.sleep(60)
        os._exit(0)
print("held", flush=True)
time.sleep(60)
"""


def holder(fork: bool = False) -> subprocess.Popen:
    """A process of the earlier run, holding the run lock (and, with ``fork``, a child that inherits it)."""
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(root=root, fork=fork)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_stale_lock_is_broken_and_this_run_holds_the_run_lock(workdir):
    assert lock_files(workdir) == ["0.input.lock", "0.output.lock"]
    assert recover.recover(".snakemake") == ["removed the stale lock of a run none of whose processes is running"]
    assert lock_files(workdir) == []
    # the incomplete output and its marker stay: Snakemake recomputes it (rerun-incomplete)
    assert Path(OUT).read_text() == "half" and any((workdir / ".snakemake" / "incomplete").iterdir())
    assert locks.run_alive(".snakemake") and locks.run_lock_holders(".snakemake") == [os.getpid()]
    assert recover.recover(".snakemake") == []  # nothing left to do


def test_a_dry_run_only_says_what_a_run_would_do(workdir):
    messages = recover.recover(".snakemake", dry_run=True)
    assert messages == ["would break the stale lock of a run none of whose processes is running"]
    assert lock_files(workdir) == ["0.input.lock", "0.output.lock"] and not locks.run_alive(".snakemake")


def test_a_live_process_of_the_run_keeps_the_lock(workdir):
    """A run of study s is refused in one line naming the live holder (never advice to break the lock); a run of
    another study is told nothing (Snakemake runs it beside the first)."""
    proc = holder()
    try:
        dry = recover.recover(".snakemake", dry_run=True, results="results", studies=["s"])
        assert len(dry) == 1 and dry[0].startswith("study s is being built by another run in this working directory")
        assert f"pid {proc.pid} (python" in dry[0] and f"on {socket.gethostname()} since 20" in dry[0]
        assert dry[0].endswith("a run now would stop and change nothing") and "unlock" not in dry[0]
        with pytest.raises(recover.Held) as held:
            recover.recover(".snakemake", results="results", studies=["s"])
        line = str(held.value)
        assert "\n" not in line and f"pid {proc.pid}" in line and "unlock" not in line
        assert line.endswith("this run stops and changes nothing: run it again once that run has ended")
        assert recover.recover(".snakemake", results="results", studies=["other"]) == []
        assert lock_files(workdir) == ["0.input.lock", "0.output.lock"]
    finally:
        proc.kill()
        proc.wait()
    release()  # the refused run ends
    # the kernel released its lock with it
    assert recover.recover(".snakemake")[0].startswith("removed the stale lock")


def test_an_orphan_of_a_killed_process_keeps_the_lock_until_it_ends(workdir):
    proc = holder(fork=True)
    proc.kill()  # SIGKILL the process that took the lock; its forked child lives on
    proc.wait()
    try:
        assert locks.run_alive(".snakemake")
        assert recover.recover(".snakemake", dry_run=True, studies=["s"])[0].startswith("study s is being built")
        assert lock_files(workdir) == ["0.input.lock", "0.output.lock"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the orphan, in the holder's session
    t0 = time.monotonic()
    while locks.run_alive(".snakemake"):
        assert time.monotonic() - t0 < 30
        time.sleep(0.02)
    assert recover.recover(".snakemake")[0].startswith("removed the stale lock")


@pytest.mark.parametrize(
    "targets, expected",
    [
        ([], ["a", "b"]),
        (["all"], ["a", "b"]),
        (["results/b/errors.csv"], ["a", "b"]),  # one job builds the default studies together
        (["results/c/table.md"], ["c"]),
        (["results/c/table.md", "results/a/solve.json"], ["a", "b", "c"]),
        (["beyond"], ["a", "b", "c"]),
    ],
)
def test_a_run_holds_the_studies_it_builds(targets, expected):
    args = argparse.Namespace(targets=targets)
    assert recover.targeted_studies(args, "results", ["a", "b"], ["a", "b", "c"]) == expected


def test_no_lock_nothing_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert recover.recover(".snakemake", dry_run=True) == [] and not os.path.exists(".snakemake/hbvm-run.lock")


@pytest.fixture(scope="module")
def parser():
    """Snakemake's own command-line parser: the namespace the workflow sees at parse time."""
    return get_argument_parser()


@pytest.mark.parametrize(
    "argv, main, expected",
    [
        (["--cores", "2"], True, "run"),
        (["--cores", "2", "--rerun-incomplete"], True, "run"),
        (["-n"], True, "dry-run"),
        (["--cores", "2"], False, None),  # a job subprocess (--mode subprocess / remote)
        (["--unlock"], True, None),
        (["--cores", "2", "--nolock"], True, None),
        (["--cores", "2", "--touch"], True, None),
        (["--summary"], True, None),
        (["--report", "report.html"], True, None),
        (["--cores", "2", "--report", "report.html", "--report-after-run"], True, "run"),
    ],
)
def test_only_a_run_of_the_workflow_recovers(parser, argv, main, expected):
    args = parser.parse_args(argv)
    assert recover.mode(args, main) == expected
    assert recover.mode(None, True) is None  # the Python API: no command line to tell a dry run from a run
