"""Helpers shared by the workflow's job scripts (workflow/scripts/solve.py, aggregate.py)."""

from __future__ import annotations

import logging
import sys


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
