"""Resume after a killed Snakemake run with the same command: break its lock once no process of it lives.

A SIGKILLed Snakemake leaves its working-directory lock (``.snakemake/locks``); the next run is
refused until ``--unlock``. Every process of a run holds the run lock ``.snakemake/hbvm-run.lock``
shared (``hbvm_workflow.locks``): the main Snakemake process from parse time, each job script from
its start, and whatever they fork (Dask workers); the kernel releases it when they die. So when the
next run finds Snakemake's lock and can take the run lock exclusively, no process of the earlier run
is alive (an orphaned solve job included), and it does what ``--unlock`` does. The outputs the
killed run left half-written carry Snakemake's incomplete markers: the default workflow profile
(``rerun-incomplete: true``) has Snakemake recompute them. While a process of the earlier run lives,
the lock stays: a run of the studies it holds stops in one line naming those processes (``Held``),
before Snakemake would refuse it with advice to ``--unlock``; a run of other studies goes on, told nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import sys
from pathlib import Path

from hbvm_core.errors import HBVMError

from .locks import hold_run_lock, run_lock_holders, run_lock_path

#: CLI options that do not execute the workflow (snakemake.cli.args_to_api, Snakemake 9): never act there
NON_EXECUTING = (
    *("lint", "list_target_rules", "list_rules", "print_compilation", "deploy_sources", "containerize"),
    *("generate_unit_tests", "dag", "rulegraph", "filegraph", "d3dag", "unlock", "cleanup_metadata"),
    *("conda_cleanup_envs", "conda_create_envs_only", "list_conda_envs", "cleanup_shadow"),
    *("container_cleanup_images", "list_changes", "list_input_changes", "list_params_changes"),
    *("list_untracked", "summary", "detailed_summary", "archive", "delete_all_output", "delete_temp_output"),
    *("touch", "nolock"),
)


def locked(snakemake_dir: str) -> bool:
    """Whether Snakemake's lock of the working directory is there."""
    folder = os.path.join(snakemake_dir, "locks")
    return os.path.isdir(folder) and any(n.endswith(".lock") for n in os.listdir(folder))


def locked_files(snakemake_dir: str = ".snakemake") -> list[str]:
    """The files that Snakemake's lock of the working directory holds (inputs and outputs of the runs that
    took it: one path a line in ``locks/<n>.input.lock``, ``locks/<n>.output.lock``)."""
    folder = os.path.join(snakemake_dir, "locks")
    found = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if name.endswith(".lock"):
            with contextlib.suppress(OSError), open(os.path.join(folder, name)) as fh:
                found += [line.strip() for line in fh if line.strip()]
    return found


def study_of(path: str, results: str, names) -> str | None:
    """The study (of ``names``) whose folder ``results/<study>/`` holds ``path``, else None."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(results))
    first = rel.split(os.sep, 1)[0]
    return first if first in names and not rel.startswith("..") else None


def describe_holders(pids: list[int]) -> str:
    """'pid 12 (snakemake) on host since 2026-01-01T10:00:00' for each pid (psutil: its name and start time)."""
    import socket
    import time

    host = socket.gethostname()
    parts = []
    for pid in pids:
        try:
            import psutil

            proc = psutil.Process(pid)
            since = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(proc.create_time()))
            parts.append(f"pid {pid} ({proc.name()}) on {host} since {since}")
        except Exception:  # noqa: BLE001 - gone meanwhile, or not to be told: the pid alone
            parts.append(f"pid {pid} on {host}")
    return ", ".join(parts) or "processes that cannot be named from here"


class Held(HBVMError):
    """Snakemake's lock of the working directory covers a study of this run and a process of the run that took
    it is alive: this run stops (never breaking the lock)."""


def recover(
    snakemake_dir: str = ".snakemake", *, dry_run: bool = False, results: str | None = None, studies=()
) -> list[str]:
    """Break Snakemake's lock if no process of the run that took it is alive; one message per action.

    While a process of that run lives, the lock stays: when it holds files of the ``studies`` this run builds
    (under ``results``), Snakemake would refuse this run, and Held says so instead, in one line naming the
    processes (pid, host, since when) and that this run stops; otherwise (another study) nothing is said, and
    Snakemake runs this one beside it. A run (not ``dry_run``) then holds the run lock shared for the rest of
    its life."""
    messages = []
    if locked(snakemake_dir):
        os.makedirs(snakemake_dir, exist_ok=True)
        fd = os.open(run_lock_path(snakemake_dir), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other process of any run holds it
        except BlockingIOError:
            names = set(studies)
            held = sorted({s for f in locked_files(snakemake_dir) if (s := study_of(f, results or "results", names))})
            if held:
                line = (
                    f"study {', '.join(held)} is being built by another run in this working directory, still "
                    f"running: {describe_holders(run_lock_holders(snakemake_dir))}; "
                )
                if dry_run:
                    messages.append(line + "a run now would stop and change nothing")
                else:
                    os.close(fd)
                    fd = -1
                    raise Held(
                        line + "this run stops and changes nothing: run it again once that run has ended"
                    ) from None
        else:
            if dry_run:
                messages.append("would break the stale lock of a run none of whose processes is running")
            else:
                from snakemake.persistence.file import FilePersistence

                FilePersistence(path=Path(snakemake_dir)).unlock()  # what --unlock does
                messages.append("removed the stale lock of a run none of whose processes is running")
        finally:
            if fd >= 0:
                os.close(fd)
    if not dry_run:
        hold_run_lock(snakemake_dir)
    return messages


def targeted_studies(args: argparse.Namespace | None, results: str, default: list[str], every: list[str]) -> list[str]:
    """The studies a run of the command line ``args`` may build: ``default`` (the default target's) without
    targets or with the rules that build them (all, solve, aggregate) or a file of one of them (their solve and
    aggregate jobs build them together); a file under ``results/<study>/`` of another study names it; any other
    target (another rule) may build any study: ``every``."""
    targets = list(getattr(args, "targets", None) or [])
    if not targets:
        return list(default)
    found: set[str] = set()
    for target in targets:
        if target in ("all", "solve", "aggregate"):
            found.update(default)
        elif (study := study_of(target, results, set(every))) is not None:
            found.update(default if study in default else [study])  # one job builds the default studies together
        else:
            return list(every)
    return sorted(found)


def cli_args() -> argparse.Namespace | None:
    """The command line of the running ``snakemake`` (the ``args`` of snakemake.cli.args_to_api, which
    is parsing this Snakefile); None when Snakemake was not started from its command line."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "args_to_api" and frame.f_globals.get("__name__") == "snakemake.cli":
            args = frame.f_locals.get("args")
            return args if isinstance(args, argparse.Namespace) else None
        frame = frame.f_back
    return None


def mode(args: argparse.Namespace | None, main_process: bool) -> str | None:
    """'run' (recover), 'dry-run' (only say what a run would do) or None (do nothing): job subprocesses
    (not the main process), the Python API (no command line), --nolock, --touch, --unlock and every
    other action that does not execute the workflow."""
    if not main_process or args is None:
        return None
    if any(getattr(args, name, None) for name in NON_EXECUTING):
        return None
    if getattr(args, "report", None) and not getattr(args, "report_after_run", False):
        return None
    return "dry-run" if getattr(args, "dryrun", False) else "run"
