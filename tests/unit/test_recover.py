"""hbvm_workflow.recover: the stale lock of a dead Snakemake is broken, every other lock is left alone.

The lock files and incomplete markers are written by Snakemake's own FilePersistence (the
format the workflow meets after a kill); the owners are real processes: a child that has
exited, a zombie, a live child, this process under a wrong start time (a reused pid).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from snakemake.cli import get_argument_parser
from snakemake.persistence.file import FilePersistence

from hbvm_workflow import recover

OUT = "results/s/errors.csv"
ZARR = "results/s/errors.zarr"
LONG = "results/s/" + "/".join(["d" * 60] * 4) + "/x.csv"  # its marker name exceeds NAME_MAX: split into folders
INPUT = "results/s/solve.json"
OTHER = "results/t/errors.csv"  # marked incomplete, but not an output of the dead run


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A working directory as a killed run leaves it: outputs half-written, markers, the lock."""
    monkeypatch.chdir(tmp_path)
    for key in (OUT, LONG, INPUT, OTHER):
        Path(key).parent.mkdir(parents=True, exist_ok=True)
        Path(key).write_text("half")
    Path(ZARR, "e_s").mkdir(parents=True)
    Path(ZARR, "zarr.json").write_text("{}")
    pers = FilePersistence(path=tmp_path / ".snakemake")
    pers._write_locks("input", [INPUT])
    pers._write_locks("output", [OUT, ZARR, LONG, "results/s/table.md"])
    for key in (OUT, ZARR, LONG, OTHER, "results/s/table.md"):  # table.md: started, not written yet
        pers._mark_incomplete(key, None)
    return tmp_path


def smk(workdir: Path) -> str:
    return str(workdir / ".snakemake")


def locks(workdir: Path) -> list[str]:
    return recover.lock_files(smk(workdir))


def state(workdir: Path) -> tuple:
    files = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file())
    return files, [(p, os.stat(p).st_mtime_ns) for p in locks(workdir)]


def dead_child() -> dict:
    """The identity of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ident = recover.process_identity(child.pid)
    child.kill()
    child.wait()
    return ident


def test_markers_decode_to_the_output_paths(workdir):
    markers = recover.incomplete_markers(smk(workdir))
    assert set(markers) == {OUT, ZARR, LONG, OTHER, "results/s/table.md"}
    assert Path(os.path.relpath(markers[LONG], smk(workdir))).parts[1].startswith("@")  # split past NAME_MAX


def test_a_dead_owner_s_lock_and_half_written_outputs_are_removed(workdir):
    record = recover.record_owner(smk(workdir), locks(workdir), owner=dead_child())
    assert recover.owner_state(record) == "dead"
    messages = recover.recover(smk(workdir))
    pid = record["pid"]
    assert messages == [
        f"removed {LONG}, left incomplete by snakemake pid {pid} (not running)",
        f"removed {OUT}, left incomplete by snakemake pid {pid} (not running)",
        f"removed {ZARR}, left incomplete by snakemake pid {pid} (not running)",
        f"removed the incomplete marker of results/s/table.md (not written) by snakemake pid {pid} (not running)",
        f"removed the stale lock of snakemake pid {pid} (not running): 0.input.lock, 0.output.lock",
    ]
    assert not locks(workdir) and recover.read_owner(smk(workdir)) is None
    assert not any(os.path.lexists(p) for p in (OUT, ZARR, LONG))
    # the dead run's input and another run's incomplete output stay, with its marker
    assert Path(INPUT).read_text() == "half" and Path(OTHER).read_text() == "half"
    assert set(recover.incomplete_markers(smk(workdir))) == {OTHER}
    assert recover.recover(smk(workdir)) == []  # nothing left to do


def test_a_dry_run_only_says_what_a_run_would_remove(workdir):
    record = recover.record_owner(smk(workdir), locks(workdir), owner=dead_child())
    before = state(workdir)
    messages = recover.recover(smk(workdir), dry_run=True)
    assert messages[0] == f"would remove {LONG}, left incomplete by snakemake pid {record['pid']} (not running)"
    assert messages[-1].startswith(f"would remove the stale lock of snakemake pid {record['pid']} (not running)")
    assert state(workdir) == before


def test_ignore_incomplete_breaks_the_lock_but_keeps_the_outputs(workdir):
    recover.record_owner(smk(workdir), locks(workdir), owner=dead_child())
    assert len(recover.recover(smk(workdir), outputs=False)) == 1
    assert not locks(workdir) and Path(OUT).exists() and OUT in recover.incomplete_markers(smk(workdir))


def test_a_reused_pid_or_a_zombie_is_not_the_owner(workdir):
    me = recover.this_process()
    assert recover.owner_state(me) == "alive"
    assert recover.owner_state({**me, "start": me["start"] - 1}) == "dead"  # this pid, another process
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    ident = recover.process_identity(zombie.pid)
    try:
        t0 = time.monotonic()
        while recover.process_start(zombie.pid)[0] != "Z":  # exited, not yet reaped
            assert time.monotonic() - t0 < 30
            time.sleep(0.01)
        assert recover.owner_state(ident) == "dead"
    finally:
        zombie.wait()


@pytest.mark.parametrize("case", ["live owner", "no owner record", "other host", "lock written after the record"])
def test_a_lock_not_provably_stale_is_left_alone(workdir, case):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        if case == "live owner":
            recover.record_owner(smk(workdir), locks(workdir), owner=recover.process_identity(child.pid))
        elif case == "other host":
            recover.record_owner(smk(workdir), locks(workdir), owner={**dead_child(), "host": "elsewhere"})
        elif case == "lock written after the record":  # the owner died; a new run has locked, not yet recorded
            recover.record_owner(smk(workdir), locks(workdir), owner=dead_child())
            for p in locks(workdir):
                text = Path(p).read_text()
                os.remove(p)
                Path(p).write_text(text)
        before = state(workdir)
        assert recover.recover(smk(workdir)) == []
        assert state(workdir) == before and len(locks(workdir)) == 2
        assert set(recover.incomplete_markers(smk(workdir))) == {OUT, ZARR, LONG, OTHER, "results/s/table.md"}
    finally:
        child.kill()
        child.wait()


def test_release_removes_only_the_callers_record(workdir):
    recover.record_owner(smk(workdir), locks(workdir), owner=dead_child())
    assert not recover.release_owner(smk(workdir)) and recover.read_owner(smk(workdir)) is not None
    recover.record_owner(smk(workdir), locks(workdir))
    assert recover.read_owner(smk(workdir))["pid"] == os.getpid()
    assert recover.release_owner(smk(workdir)) and recover.read_owner(smk(workdir)) is None


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
