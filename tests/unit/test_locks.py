"""hbvm_workflow.locks: one writer per study, from any process; the kernel releases a dead holder's lock."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hbvm_workflow.layout import lock_path
from hbvm_workflow.locks import Busy, study_lock

ROOT = str(Path(__file__).resolve().parents[2])
HOLD = """
import sys, time
sys.path.insert(0, {root!r})
from hbvm_workflow.locks import study_lock
with study_lock({path!r}, "s"):
    print("held", flush=True)
    time.sleep({seconds})
"""


def holder(path: str, seconds: float, cwd: Path) -> subprocess.Popen:
    """Another process (in another working directory) writing study s."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(root=ROOT, path=path, seconds=seconds)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_stops_naming_the_holder(tmp_path):
    path = lock_path(str(tmp_path / "results"), "s")
    (tmp_path / "other").mkdir()
    proc = holder(path, 60, tmp_path / "other")
    try:
        t0 = time.monotonic()
        with pytest.raises(Busy) as info, study_lock(path, "s", timeout=0.3):
            pass
        assert time.monotonic() - t0 < 5
        msg = str(info.value)
        assert "\n" not in msg and msg.startswith(
            f"study s is being written by pid {proc.pid} on {socket.gethostname()}"
        )
        assert f"in {tmp_path / 'other'} since " in msg and "lock_timeout" in msg
    finally:
        proc.kill()
        proc.wait()
    # SIGKILLed: the kernel released its lock, taken at once
    t0 = time.monotonic()
    with study_lock(path, "s", timeout=0):
        assert Path(path).read_text().startswith(f"pid {os.getpid()} ")
    assert time.monotonic() - t0 < 1


def test_a_second_writer_waits_for_the_first(tmp_path, capsys):
    path = lock_path(str(tmp_path / "results"), "s")
    proc = holder(path, 1.5, tmp_path)
    t0 = time.monotonic()
    with study_lock(path, "s", timeout=30):
        assert time.monotonic() - t0 > 1.2  # only once the first has let go
    err = capsys.readouterr().err
    assert f"study s is being written by pid {proc.pid} " in err and "this run waits up to 30 s (lock_timeout)" in err
    proc.wait()
