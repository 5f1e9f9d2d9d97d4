"""Resume after a killed Snakemake run with the same command: break the lock of a provably dead owner.

A SIGKILLed Snakemake leaves its working-directory lock (``.snakemake/locks/<i>.input.lock``,
``<i>.output.lock``: one path per line) and the incomplete markers of the jobs it was running
(``.snakemake/incomplete/<urlsafe base64 of the output path>``, split into ``@``-prefixed folders
past NAME_MAX); the next run is refused until ``--unlock`` and ``--rerun-incomplete``
(snakemake.persistence.file.FilePersistence, Snakemake 9).

Here the main Snakemake process records itself as the owner of its lock once it holds it
(``onstart``, workflow/rules/recover.smk): pid, process start time (/proc/<pid>/stat field 22, so
a reused pid is not the owner), boot id, pid namespace and host, and the identity (inode, mtime,
size) of its own lock files, in ``.snakemake/hbvm-owner.json``. When the next run parses the
Snakefile and finds those very lock files while the owner is provably dead, it deletes what the
owner left half-written (every output of its output lock that has an incomplete marker), the
markers, the lock files and the record. A lock without a record, a record whose lock files are
not the ones there, and an owner that is alive or cannot be checked (another host, another pid
namespace) are left alone: Snakemake refuses the run exactly as before.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: the owner record, inside Snakemake's persistence folder
OWNER = "hbvm-owner.json"
FORMAT = 1

#: CLI actions that do not execute the workflow (snakemake.cli.args_to_api, Snakemake 9.27): never recover there
NON_EXECUTING = (
    "lint",
    "list_target_rules",
    "list_rules",
    "print_compilation",
    "deploy_sources",
    "containerize",
    "generate_unit_tests",
    "dag",
    "rulegraph",
    "filegraph",
    "d3dag",
    "unlock",
    "cleanup_metadata",
    "conda_cleanup_envs",
    "conda_create_envs_only",
    "list_conda_envs",
    "cleanup_shadow",
    "container_cleanup_images",
    "list_changes",
    "list_input_changes",
    "list_params_changes",
    "list_untracked",
    "summary",
    "detailed_summary",
    "archive",
    "delete_all_output",
    "delete_temp_output",
    "touch",
    "nolock",
)


# --------------------------------------------------------------------------- processes
def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def process_start(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of process ``pid`` from /proc/<pid>/stat; None if none."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; field 3 is the state, 22 the start time
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])


def pid_namespace() -> int | None:
    """Inode of this process's pid namespace (pids name the same processes only within one)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def process_identity(pid: int) -> dict:
    """What names process ``pid`` (of this host and pid namespace) for good: host, boot id, pid namespace,
    pid and start time (None if there is no such process)."""
    start = process_start(pid)
    return {
        "host": socket.gethostname(),
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "pid_ns": pid_namespace(),
        "pid": pid,
        "start": start[1] if start else None,
    }


def this_process() -> dict:
    """The identity of the calling process (``process_identity``)."""
    return process_identity(os.getpid())


def owner_state(owner: dict) -> str:
    """'dead' (provably: no such process, its pid reused, a zombie, or the host rebooted since),
    'alive', or 'unknown' (another host or pid namespace, or no /proc: nothing to prove it)."""
    me = this_process()
    if None in (me["start"], me["boot_id"], owner.get("start"), owner.get("boot_id")):
        return "unknown"
    if owner.get("host") != me["host"] or owner.get("pid_ns") != me["pid_ns"]:
        return "unknown"
    if owner["boot_id"] != me["boot_id"]:
        return "dead"  # the machine rebooted: every process of that boot is gone
    now = process_start(int(owner["pid"]))
    if now is None or now[1] != owner["start"] or now[0] in ("Z", "X"):
        return "dead"
    return "alive"


# --------------------------------------------------------------------------- Snakemake's lock and markers
def lock_identity(path: str) -> dict | None:
    """What tells a lock file from a later one at the same path: inode, mtime (ns) and size."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"name": os.path.basename(path), "ino": st.st_ino, "mtime_ns": st.st_mtime_ns, "size": st.st_size}


def lock_files(snakemake_dir: str) -> list[str]:
    """The lock files of a working directory (Snakemake's ``locks/<i>.input.lock`` and ``<i>.output.lock``)."""
    folder = os.path.join(snakemake_dir, "locks")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if n.endswith((".input.lock", ".output.lock"))]


def marker_key(relpath: str) -> str | None:
    """The output path an incomplete marker names (FilePersistence._record_path, inverted); None if not one."""
    parts = Path(relpath).parts
    b64 = "".join(p[1:] if p.startswith("@") else p for p in parts[:-1]) + parts[-1]
    try:
        return base64.urlsafe_b64decode(b64.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def incomplete_markers(snakemake_dir: str) -> dict[str, str]:
    """Output path -> marker file, for every incomplete marker under ``.snakemake/incomplete``."""
    folder = os.path.join(snakemake_dir, "incomplete")
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            key = marker_key(os.path.relpath(path, folder))
            if key is not None:
                out[key] = path
    return out


# --------------------------------------------------------------------------- the owner record
def owner_path(snakemake_dir: str) -> str:
    return os.path.join(snakemake_dir, OWNER)


def record_owner(snakemake_dir: str, locks: Iterable[str], owner: dict | None = None) -> dict | None:
    """Record the calling process (or the process ``owner``, a ``process_identity``) as the owner of
    ``locks``, the lock files it wrote; None (and no record) if there are none."""
    ids = [i for i in (lock_identity(p) for p in locks) if i is not None]
    if not ids:
        return None
    record = {"format": FORMAT, **(owner or this_process()), "locks": ids}
    path = owner_path(snakemake_dir)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(record, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)
    return record


def read_owner(snakemake_dir: str) -> dict | None:
    """The owner record, None if there is none or it cannot be read."""
    try:
        with open(owner_path(snakemake_dir)) as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("format") == FORMAT else None


def release_owner(snakemake_dir: str) -> bool:
    """Remove the owner record if it names the calling process (a run that ends normally)."""
    record, me = read_owner(snakemake_dir), this_process()
    if record is None or (record.get("pid"), record.get("start")) != (me["pid"], me["start"]):
        return False
    with contextlib.suppress(FileNotFoundError):
        os.remove(owner_path(snakemake_dir))
    return True


def workflow_locks(workflow) -> list[str]:
    """The lock files the running Snakemake wrote itself (FilePersistence._lockfile; [] for other backends)."""
    mine = getattr(getattr(workflow, "persistence", None), "_lockfile", None)
    return [str(p) for p in mine.values()] if isinstance(mine, dict) else []


# --------------------------------------------------------------------------- recovery
@dataclass
class Plan:
    """What a dead owner left: its lock files, and its outputs that carry an incomplete marker."""

    pid: int
    locks: list[str] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (output path, marker)


def plan(snakemake_dir: str) -> Plan | None:
    """The stale lock to break, or None: no lock, no owner record, not its lock files, owner not provably dead."""
    present = {os.path.basename(p): p for p in lock_files(snakemake_dir)}
    if not present:
        return None
    record = read_owner(snakemake_dir)
    if record is None:
        return None  # a lock we cannot attribute is not ours to break
    theirs = [
        present[i["name"]]
        for i in record.get("locks", [])
        if i.get("name") in present and lock_identity(present[i["name"]]) == i
    ]
    if not theirs or owner_state(record) != "dead":
        return None
    written: set[str] = set()
    for path in theirs:
        if path.endswith(".output.lock"):
            with open(path) as fh:
                written |= {line.strip() for line in fh if line.strip()}
    markers = incomplete_markers(snakemake_dir)
    outputs = sorted((key, markers[key]) for key in written if key in markers)
    return Plan(pid=int(record["pid"]), locks=theirs, outputs=outputs)


def _remove(path: str) -> bool:
    """Delete a file, link or folder; False if there was nothing."""
    if os.path.islink(path) or os.path.isfile(path):
        os.remove(path)
        return True
    if os.path.isdir(path):
        shutil.rmtree(path)
        return True
    return False


def recover(snakemake_dir: str, *, dry_run: bool = False, outputs: bool = True) -> list[str]:
    """Break the stale lock of a dead owner (see ``plan``); one message per action, in the order done.

    Deletes each half-written output and its marker first, then the lock files and the owner
    record, so an interruption here leaves a state the next call finishes. ``dry_run``: only say
    what would be done. ``outputs=False`` (``--ignore-incomplete``): keep the outputs and markers.
    """
    p = plan(snakemake_dir)
    if p is None:
        return []
    verb = "would remove" if dry_run else "removed"
    who = f"snakemake pid {p.pid} (not running)"
    cwd = os.path.realpath(os.getcwd())
    messages = []
    for key, marker in p.outputs if outputs else []:
        target = os.path.realpath(key)
        if target == cwd or cwd.startswith(target.rstrip(os.sep) + os.sep):
            continue  # never the working directory or a folder above it
        if dry_run:
            exists = os.path.lexists(key)
        else:
            exists = _remove(key)
            with contextlib.suppress(FileNotFoundError):
                os.remove(marker)
        what = f"{key}, left incomplete" if exists else f"the incomplete marker of {key} (not written)"
        messages.append(f"{verb} {what} by {who}")
    if not dry_run:
        for path in p.locks:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        with contextlib.suppress(FileNotFoundError):
            os.remove(owner_path(snakemake_dir))
    names = ", ".join(os.path.basename(x) for x in p.locks)
    messages.append(f"{verb} the stale lock of {who}: {names}")
    return messages


# --------------------------------------------------------------------------- when to recover
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
