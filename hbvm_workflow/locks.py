"""Locks the kernel keeps: released when the holding process dies, however it dies.

- the study lock (``results/<study>/.lock``, ``layout.lock_path``): one writer per study. The solve
  and aggregate steps hold it exclusively for their whole run, from any working directory; a second
  one waits up to ``lock_timeout`` seconds, then stops with one line naming the holder (the pid,
  host, working directory and start time it wrote into the file: the flock decides, the text only
  names);
- the run lock (``.snakemake/hbvm-run.lock``): every process of a Snakemake run (the main process
  and each job script, with whatever they fork) holds it shared; a later run may break Snakemake's
  lock of the working directory only when it can take the run lock exclusively, that is when no
  process of the earlier run is alive (workflow/rules/recover.smk).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import time
from collections.abc import Iterator

from hbvm_core.errors import HBVMError

from .layout import lock_path, snakemake_lock_path

#: seconds a solve or aggregate step waits for another one holding its study (config ``lock_timeout``)
LOCK_TIMEOUT = 600.0
RUN_LOCK = "hbvm-run.lock"

_held: dict[str, int] = {}  # run lock path -> the descriptor this process keeps locked until it exits
_forever = contextlib.ExitStack()  # the study locks of a Snakemake run (hold_studies), never let go before it exits
_studies: set[str] = set()


class Busy(HBVMError):
    """A study is being written by another process."""


def _holder_line() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()} in {os.getcwd()} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"


def holder(path: str) -> str:
    """What the current holder of the lock at ``path`` wrote (may be stale: the flock decides)."""
    try:
        with open(path) as fh:
            return fh.read().strip() or "a process that has not written its name yet"
    except OSError:
        return "unknown"


def _acquire(fd: int, how: int, timeout: float) -> bool:
    """flock(fd, how) within ``timeout`` seconds (polling, so it stays interruptible); False if not."""
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


@contextlib.contextmanager
def study_lock(path: str, study: str, timeout: float = LOCK_TIMEOUT, log=None) -> Iterator[None]:
    """Hold the study's lock for the ``with`` block; raise Busy naming the holder after ``timeout`` s."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        # a second, quietly: the holder may be about to let go, or not have written its name yet
        quiet = min(1.0, timeout)
        if not _acquire(fd, fcntl.LOCK_EX, quiet):
            line = (
                f"study {study} is being written by {holder(path)}; this run waits up to {timeout:g} s "
                "(lock_timeout) for it to end"
            )
            log.info(line) if log is not None else print(line, file=sys.stderr, flush=True)
            if not _acquire(fd, fcntl.LOCK_EX, timeout - quiet):
                raise Busy(
                    f"study {study} is being written by {holder(path)} (lock {path}); waited {timeout:g} s, "
                    "this run stops and changes nothing: run it again once that one has ended, or raise lock_timeout"
                )
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_holder_line() + "\n").encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the text stays for the next holder to overwrite


def hold_studies(results: str, names, timeout: float = LOCK_TIMEOUT) -> None:
    """Hold, until this process exits, the lock of each study ``names`` for the Snakemake run that builds
    them (``layout.snakemake_lock_path``; waiting up to ``timeout`` s for another run, else Busy)."""

    for name in sorted(names):
        path = os.path.abspath(snakemake_lock_path(results, name))
        if path not in _studies:
            _forever.enter_context(study_lock(path, name, timeout))
            _studies.add(path)


def wait_for_writers(results: str, names, timeout: float = LOCK_TIMEOUT) -> None:
    """Wait (up to ``timeout`` s, else Busy naming the holder) until no job writes the studies ``names``: their
    job lock (``layout.lock_path``) is taken and let go at once. A job of an earlier run whose Snakemake was
    killed (an orphan) holds it until it ends."""

    for name in sorted(names):
        with study_lock(os.path.abspath(lock_path(results, name)), name, timeout):
            pass


def run_lock_path(snakemake_dir: str = ".snakemake") -> str:
    return os.path.join(snakemake_dir, RUN_LOCK)


def hold_run_lock(snakemake_dir: str = ".snakemake", timeout: float = 60.0) -> None:
    """Hold the run lock shared until this process (and whatever it forks) exits."""
    path = os.path.abspath(run_lock_path(snakemake_dir))
    if path in _held:
        return
    os.makedirs(snakemake_dir, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if not _acquire(fd, fcntl.LOCK_SH, timeout):  # only a starting run holds it exclusively, briefly
        os.close(fd)
        raise HBVMError(f"could not take the run lock {run_lock_path(snakemake_dir)} within {timeout:g} s")
    _held[path] = fd


def run_alive(snakemake_dir: str = ".snakemake") -> bool:
    """Whether a process holds the run lock (tried exclusively, not waiting; released at once)."""
    path = run_lock_path(snakemake_dir)
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        return not _acquire(fd, fcntl.LOCK_EX, 0)
    finally:
        os.close(fd)


def run_lock_holders(snakemake_dir: str = ".snakemake") -> list[int]:
    """Pids holding the run lock, from /proc/locks (Linux; [] where it cannot be told)."""
    try:
        ino = os.stat(run_lock_path(snakemake_dir)).st_ino
        with open("/proc/locks") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        f = line.split()
        # "1: FLOCK  ADVISORY  READ 1234 08:01:5678 0 EOF" (blocked waiters have "->" after the number)
        f = [x for x in f if x != "->"]
        if len(f) >= 6 and f[1] == "FLOCK" and f[5].rsplit(":", 1)[-1] == str(ino):
            pids.append(int(f[4]))
    return sorted(set(pids))
