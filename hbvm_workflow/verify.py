"""Verify stores: read every store under some folders in full and report each damaged one.

    python -m hbvm_workflow verify results/<study> [more folders]

A store is a run store (a file ``*.zarr.zip``) or a folder ``*.zarr`` with a
``zarr.json`` (errors.zarr, and run stores of older versions); a study's
``.tmp`` folder is skipped. Each is checked against the integrity record of its
attrs (every chunk present with its size) and then read in full, so a chunk
that fails its CRC-32C (or the zip's CRC-32) checksum is found too. Each study's
manifest (``solve.json``, in a folder given or one level below it) is read as
well: a run it lists as done whose store is gone is missing. A store is also
compared with its seal (``integrity``: an edited attribute or coordinate is
damage); a sharded store's damage names the shard and its file. One line per
damaged or missing store (path, array, what; a store that is not the run its
manifest lists counts as damaged, as ``list studies`` counts it), then a summary
line with the count of each; exit status 1 if any store is damaged or missing, 2
if a folder does not exist.
"""

from __future__ import annotations

import os
import sys

from . import shards
from .layout import STORE_SUFFIX, manifest_path
from .plan import planned_jobs
from .storage import TMP_DIR, Expected, corruption, mismatch_phrase, store_verdict
from .store_kinds import recorded_kind

#: the name of a study's manifest (``layout.manifest_path``)
MANIFEST = os.path.basename(manifest_path("results", "study"))


def find_stores(folder: str) -> list[str]:
    """The stores under ``folder`` (or ``folder`` itself when it is one), sorted; temporaries skipped."""
    if folder.rstrip(os.sep).endswith(".zarr") and os.path.isfile(os.path.join(folder, "zarr.json")):
        return [folder]
    if folder.endswith(STORE_SUFFIX) and os.path.isfile(folder):
        return [folder]
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != TMP_DIR)
        found += [os.path.join(root, f) for f in files if f.endswith(STORE_SUFFIX)]
        for d in list(dirs):
            path = os.path.join(root, d)
            if d.endswith(".zarr") and os.path.isfile(os.path.join(path, "zarr.json")):
                found.append(path)
                dirs.remove(d)  # its arrays are not stores
    return sorted(found)


def check_store(path: str) -> tuple[str | None, str] | None:
    """(array, what) for the first problem of the store at ``path``, None when it is intact (reads it all); a
    sharded store (``shards``): every shard read back, and each must be complete."""

    attrs = shards.read_attrs(path)
    if attrs is None:
        return corruption(path)
    try:
        shards.read_all(path)  # every chunk's checksum, every shard's record
    except Exception as exc:  # noqa: BLE001 - named in one line
        return getattr(exc, "array", None), str(getattr(exc, "what", exc))
    return None


def manifests(folder: str) -> list[str]:
    """The study manifests (solve.json) of ``folder``: its own (a study's folder) or those of its studies."""
    if os.path.isfile(os.path.join(folder, MANIFEST)):
        return [os.path.join(folder, MANIFEST)]
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [p for n in names if os.path.isfile(p := os.path.join(folder, n, MANIFEST))]


def missing_stores(manifest: str) -> list[tuple[str, str]]:
    """(store, run id) of each run the manifest lists as done (status ok) whose store is not there."""
    import json

    base = os.path.dirname(manifest)
    try:
        with open(manifest) as fh:
            record = json.load(fh)
        return recorded_kind(record).missing(record, base)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [(manifest, "(the manifest itself is unreadable)")]


def mismatched_stores(manifest: str, damaged=frozenset()) -> list[tuple[str, str]]:
    """(store, why) of each run the manifest lists as done whose store is there but is not that run
    (``storage.store_verdict`` against the run of the plans, or the manifest's hash, h and t_end); the stores
    ``damaged`` (real paths: named already) are left out."""
    import json

    try:
        with open(manifest) as fh:
            jobs = json.load(fh)["jobs"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    base = os.path.dirname(manifest)
    plans = planned_jobs(os.path.dirname(base))
    out = []
    for job in jobs:
        store = os.path.join(base, job.get("store", ""))
        if job.get("status") != "ok" or not os.path.lexists(store) or os.path.realpath(store) in damaged:
            continue
        planned = plans.get(job.get("hash"))
        run = {k: job[k] for k in ("h", "t_end") if k in job}
        expected = Expected.of_job(planned) if planned else Expected(job.get("hash"), run=run)
        verdict = store_verdict(store, expected)
        if verdict.status in ("stale", "altered"):
            out.append((store, mismatch_phrase(verdict)))
    return out


def verify(folders: list[str], out=None) -> int:
    """Check every store under ``folders`` and every run their manifests list; print one line per damaged or
    missing store and a summary. Returns the exit status."""
    out = out or sys.stdout
    absent = [f for f in folders if not os.path.exists(f)]
    for f in absent:
        print(f"{f}: no such folder", file=out)
    present = [f for f in folders if f not in absent]
    stores = [s for f in present for s in find_stores(f)]
    damaged, named = 0, set()
    for store in stores:
        found = check_store(store)
        if found is not None:
            damaged += 1
            named.add(os.path.realpath(store))
            array, what = found
            print(f"{store}: {f'array {array}: ' if array else ''}{what}", file=out)
    missing = mismatched = 0
    for manifest in sorted({m for f in present for m in manifests(f)}):
        for store, run in missing_stores(manifest):
            missing += 1
            print(f"{store}: missing (run {run} of {manifest})", file=out)
        for store, why in mismatched_stores(manifest, named):
            mismatched += 1
            print(f"{store} {why}", file=out)
    damaged += mismatched  # not the run it claims to be: its attrs edited, as ``list studies`` counts it
    summary = f"verified {len(stores)} store(s) in {len(present)} folder(s): {damaged} damaged, {missing} missing"
    print(summary, file=out)
    if damaged or missing:
        return 1
    return 2 if absent else 0
