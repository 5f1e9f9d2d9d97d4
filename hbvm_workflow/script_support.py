"""Helpers shared by the workflow's job scripts and steps (solve_step, summary_job, scripts/aggregate.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator

from .layout import lock_path
from .locks import LOCK_TIMEOUT, hold_run_lock, study_lock


def as_list(paths) -> list[str]:
    """A Snakemake named input/output/log as a list (a single path is a str)."""
    return [paths] if isinstance(paths, str) else list(paths)


def end_process() -> None:
    """End a job's process that has written its outputs, without the interpreter's teardown (the modules of Dask
    and numba, the plan's objects: some 0.4 s of a solve job): its logs and streams flushed, then ``os._exit(0)``.
    A process with a child still alive (a Dask worker not gone yet) exits as usual, so that they are ended."""
    import multiprocessing

    if multiprocessing.active_children():
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def study_logger(step: str, study: str, path: str) -> logging.Logger:
    """The logger of one study in a job (``step``: solve, aggregate): to its own log file and to stderr."""
    log = logging.getLogger(f"hbvm.{step}.{study}")
    log.setLevel(logging.INFO)
    log.propagate = False
    fmt = logging.Formatter(f"%(asctime)s [{study}] %(message)s", "%H:%M:%S")
    console = logging.StreamHandler(sys.stderr)
    console.addFilter(lambda record: not getattr(record, "file_only", False))
    for handler in (logging.FileHandler(path, mode="w"), console):
        handler.setFormatter(fmt)
        log.addHandler(handler)
    return log


#: log ``extra`` of a line for the log file only (a per-run line while a ``Progress`` shows the count)
FILE_ONLY = {"file_only": True}


def plural(n: int, noun: str) -> str:
    """'1 run', '2 runs'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def tell_studies(logs: dict[str, logging.Logger], names, message: str) -> None:
    """A fact shared by the studies ``names`` of a job (the cluster, the kernels, the batches): one line on
    stderr, labelled with the study or the number of studies, and the line in each study's log file."""
    names = sorted(set(names))
    for name in names:
        logs[name].info(message, extra=FILE_ONLY)
    label = names[0] if len(names) == 1 else f"{len(names)} studies"
    console = logging.getLogger("hbvm.scripts.shared")
    console.setLevel(logging.INFO)
    console.propagate = False
    if not console.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s [%(label)s] %(message)s", "%H:%M:%S"))
        console.addHandler(handler)
    console.info(message, extra={"label": label})


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """The solve step's progress on stderr: runs done / total, failed, elapsed, estimated time left.

    On a terminal one live line, redrawn at most once a second (a background thread keeps the
    clock moving between runs); otherwise plain lines, at most every ``plain_every`` seconds or
    each tenth of the runs, and the last one. Use as a context manager; ``update(failed)`` per run.
    """

    def __init__(self, total: int, label: str = "solve", stream=None, plain_every: float = 5.0):
        self.total, self.label = int(total), label
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.plain_every = plain_every
        self.done = self.failed = 0
        self.t0 = time.monotonic()
        self._last = -1.0
        self._last_tenth = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True) if self.tty else None

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        text = f"{self.label}: {self.done}/{self.total} runs"
        if self.failed:
            text += f", {self.failed} failed"
        text += f", {_clock(elapsed)} elapsed"
        if 0 < self.done < self.total:
            text += f", ~{_clock(elapsed / self.done * (self.total - self.done))} left"
        return text

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if self.tty:
                if force or now - self._last >= 1.0:
                    self.stream.write("\r" + self.line() + "\x1b[K")
                    self.stream.flush()
                    self._last = now
                return
            tenth = self.done * 10 // max(1, self.total)
            if force or tenth > self._last_tenth or now - self._last >= self.plain_every:
                self.stream.write(self.line() + "\n")
                self.stream.flush()
                self._last, self._last_tenth = now, tenth

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def update(self, failed: bool = False, runs: int = 1) -> None:
        """``runs`` more done (a shard: its runs), ``failed`` among them (one)."""
        self.done += runs
        self.failed += bool(failed)
        self._draw(force=self.done == self.total)

    def __enter__(self) -> Progress:
        self._last = time.monotonic() if not self.tty else -1.0
        if self._thread is not None:
            self._draw(force=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()


@contextlib.contextmanager
def one_line_errors(log_paths) -> Iterator[None]:
    """Run a job's body: an HBVMError (bad input, a study another process writes, an unreachable
    scheduler) ends the job with one line on stderr; its traceback goes to the job's logs."""
    from hbvm_core.errors import HBVMError

    try:
        yield
    except HBVMError as exc:
        trace = traceback.format_exc()
        for path in as_list(log_paths):
            with contextlib.suppress(OSError), open(path, "a") as fh:
                fh.write(trace)
        print(f"hbvm: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


@contextlib.contextmanager
def job_locks(config: dict, studies: list[str], log=None) -> Iterator[None]:
    """The locks a job script holds: the run lock (shared, until it exits) and each study's lock
    (``hbvm_workflow.locks``), taken in name order so two jobs never wait on each other."""

    hold_run_lock()
    results = config.get("results", "results")
    timeout = float(config.get("lock_timeout", LOCK_TIMEOUT))
    with contextlib.ExitStack() as stack:
        for name in sorted(studies):
            stack.enter_context(study_lock(lock_path(results, name), name, timeout, log))
        yield
