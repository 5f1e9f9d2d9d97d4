"""Resume after a killed Snakemake run with the same command: break its lock once no process of it lives.

A SIGKILLed Snakemake leaves its working-directory lock (``.snakemake/locks``); the next run is
refused until ``--unlock``. Every process of a run holds the run lock ``.snakemake/hbvm-run.lock``
shared (``hbvm_workflow.locks``): the main Snakemake process from parse time, each job script from
its start, and whatever they fork (Dask workers); the kernel releases it when they die. So when the
next run finds Snakemake's lock and can take the run lock exclusively, no process of the earlier run
is alive (an orphaned solve job included), and it does what ``--unlock`` does. The outputs the
killed run left half-written carry Snakemake's incomplete markers: the default workflow profile
(``rerun-incomplete: true``) has Snakemake recompute them. While a process of the earlier run lives,
the lock stays and Snakemake refuses the run (one line says which processes hold it).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
from pathlib import Path

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


def recover(snakemake_dir: str = ".snakemake", *, dry_run: bool = False) -> list[str]:
    """Break Snakemake's lock if no process of the run that took it is alive; one message per action.

    A run (not ``dry_run``) then holds the run lock shared for the rest of its life."""
    messages = []
    if locked(snakemake_dir):
        os.makedirs(snakemake_dir, exist_ok=True)
        fd = os.open(run_lock_path(snakemake_dir), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no other process of any run holds it
        except BlockingIOError:
            pids = ", ".join(map(str, run_lock_holders(snakemake_dir))) or "unknown"
            messages.append(
                f"kept the lock of this working directory: processes of the run that took it are still "
                f"running (pids {pids}); this run is refused until they end"
            )
        else:
            if dry_run:
                messages.append("would break the stale lock of a run none of whose processes is running")
            else:
                from snakemake.persistence.file import FilePersistence

                FilePersistence(path=Path(snakemake_dir)).unlock()  # what --unlock does
                messages.append("removed the stale lock of a run none of whose processes is running")
        finally:
            os.close(fd)
    if not dry_run:
        hold_run_lock(snakemake_dir)
    return messages


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
