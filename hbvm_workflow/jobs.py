"""Helpers shared by the workflow's job scripts (workflow/scripts/solve.py, aggregate.py)."""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from collections.abc import Iterator


def as_list(paths) -> list[str]:
    """A Snakemake named input/output/log as a list (a single path is a str)."""
    return [paths] if isinstance(paths, str) else list(paths)


def study_logger(step: str, study: str, path: str) -> logging.Logger:
    """The logger of one study in a job (``step``: solve, aggregate): to its own log file and to stderr."""
    log = logging.getLogger(f"hbvm.{step}.{study}")
    log.setLevel(logging.INFO)
    log.propagate = False
    fmt = logging.Formatter(f"%(asctime)s [{study}] %(message)s", "%H:%M:%S")
    for handler in (logging.FileHandler(path, mode="w"), logging.StreamHandler(sys.stderr)):
        handler.setFormatter(fmt)
        log.addHandler(handler)
    return log


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
    from .layout import lock_path
    from .locks import LOCK_TIMEOUT, hold_run_lock, study_lock

    hold_run_lock()
    results = config.get("results", "results")
    timeout = float(config.get("lock_timeout", LOCK_TIMEOUT))
    with contextlib.ExitStack() as stack:
        for name in sorted(studies):
            stack.enter_context(study_lock(lock_path(results, name), name, timeout, log))
        yield
