"""The two kinds of store a study's runs go to, behind one interface (``store_kind``): a store per run
(``RunStores``, ``save: trajectory``) and one sharded store of all of them (``ShardedStore``, ``save: summary``).

Each prepares the solve (``prepare``: which runs are reused and which are left to compute, as run tasks or shard
specs), takes the results of the tasks (``summary``, filled by ``dispatch.compute``), finishes it (``finish``: the
manifest results/<study>/solve.json, the runs marker and the study's closing log line) and aggregates the study's
numbers (``aggregate``); of a solved study's manifest (``recorded_kind``) they tell its runs' counts (``counts``),
the stores that are missing or damaged (``missing``, ``damaged``) and open it (``open``). The workflow's steps do
not branch on the kind.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

from . import shards
from .ensemble_errors import STATUS_WORDS, compute_summary_errors
from .layout import errors_zarr, legacy_store, runs_marker, shard_store
from .runs import PlannedJobs
from .script_support import plural
from .shards import COUNTS, complete, damaged_shards, finish, manifest_entry, open_shards, read_rows
from .storage import (
    FAILED,
    FORMAT,
    Expected,
    clean_temporaries,
    corruption,
    damage,
    file_signature,
    mismatch_phrase,
    open_errors,
    open_trajectory,
    read_attrs,
    remove_path,
    set_aside,
    store_state,
    store_verdict,
)
from .tables import compute_errors


def reuse(study, retry_failed: bool, log: logging.Logger) -> tuple[list, dict]:
    """(runs to compute, summary of the reused ones by job id) of one study."""

    for p in clean_temporaries(study.dir):
        log.info(f"removed the leftover temporary {p}")
    legacy = remove_legacy_stores(study)
    if legacy:
        log.warning(
            f"removed {legacy} run store(s) in the older folder layout (<run>.zarr): a run store is one "
            f"file <run>.zarr.zip now; those runs are computed again"
        )
    todo, summary = [], {}
    for job in study.jobs.values():
        # the one predicate of a good store (the aggregation and the readers decide by it too); stale: another
        # hash or format (replaced when recomputed); damaged, altered (its attrs edited): set aside, recomputed
        verdict = store_verdict(job.store, Expected.of_job(job))
        status, a = verdict.status, verdict.attrs
        if status in ("damaged", "altered"):
            aside = set_aside(job.store)
            where = f"; set aside as {aside}" if aside else ""
            if status == "damaged":
                array = f"array {verdict.array}: " if verdict.array else ""
                log.warning(f"damaged store {job.store}: {array}{verdict.why}{where}; recomputing it")
            else:
                log.warning(f"store {job.store} {mismatch_phrase(verdict)}{where}; recomputing it")
        if status == "complete":
            summary[job.id] = {"status": "ok", "steps": a["steps"], "wall_s": a.get("wall_s"), "computed": False}
        elif status == "failed" and not retry_failed:
            summary[job.id] = {"status": "failed", "steps": job.steps, "error": a.get("error"), "computed": False}
        else:
            todo.append(job)
    log.info(f"{plural(len(study.jobs), 'run')}: {len(summary)} reused, {len(todo)} to compute")
    return todo, summary


def remove_legacy_stores(study) -> int:
    """Remove the study's run stores (and failure markers) of the folder layout; returns how many."""

    removed = 0
    for job in study.jobs.values():
        old = legacy_store(job.store)
        for path in (old, old + FAILED) if old else ():
            if os.path.lexists(path):
                remove_path(path)
                removed += path == old
    return removed


def write_manifest(study, summary: dict, path: str) -> dict:
    """results/<study>/solve.json: every run, its status and, for a stored run, its file signature
    (size and mtime: a store changed afterwards is found at the next parse without opening it)."""

    jobs = []
    for job in study.jobs.values():
        jobs.append(
            {
                "id": job.id,
                "label": job.label,
                "name": job.name,
                "h": job.h,
                "t_end": job.t_end,
                "store": os.path.relpath(job.store, study.dir),
                "hash": job.hash,
                **summary[job.id],
                **({"stat": file_signature(job.store)} if summary[job.id]["status"] == "ok" else {}),
            }
        )
    computed = [j["id"] for j in jobs if j["computed"]]
    failed = [j["id"] for j in jobs if j["status"] == "failed"]
    manifest = {"study": study.name, "jobs": jobs, "computed": computed, "failed": failed}
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as fh:
            json.dump(manifest, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:  # a full disk: no temporary left behind
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return manifest


def write_shard_manifest(study, table, summary: dict, path: str) -> dict:
    """results/<study>/solve.json of a sharded study (``save: summary``): its store, each shard's record, and how
    many runs were integrated, copied from an earlier store, reused in complete shards, and failed."""

    finish(study)  # every shard complete: an earlier store of other runs is removed
    done = summary.get("shards", [])
    entry = manifest_entry(study, table)
    manifest = {
        "study": study.name,
        "save": "summary",
        **entry,
        "computed": sum(r["computed"] for r in done),
        "copied": sum(r["copied"] for r in done),
        "reused": summary["reused"],
        "failed": sum(s["failed"] or 0 for s in entry["shards"]),
    }
    if manifest["failed"]:  # the report at exit names the first and counts them by reason (hbvm_workflow.outcome)
        manifest["failed_runs"], manifest["failed_reasons"] = failed_of_shards(study, entry)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)
    return manifest


#: how many failed runs of a sharded study its manifest names (all are counted, by reason)
NAMED_FAILED = 10


def failed_of_shards(study, entry: dict) -> tuple[list[str], dict[str, int]]:
    """(the ids of the first ``NAMED_FAILED`` failed runs, {reason: how many}) of a sharded study: the status column
    of ``counts`` of each shard whose record counts failed runs (``entry``: ``shards.manifest_entry``)."""

    store = os.path.join(study.dir, entry["store"])
    rows, codes = [], []
    for shard in entry["shards"]:
        if shard["failed"]:
            status = read_rows(store, "counts", np.arange(shard["start"], shard["stop"]))[:, COUNTS.index("status")]
            bad = np.flatnonzero(status != 0)
            rows += (bad + shard["start"]).tolist()
            codes += status[bad].tolist()
    reasons: dict[str, int] = {}
    for code in codes:
        word = STATUS_WORDS.get(int(code), f"status {int(code)}")
        reasons[word] = reasons.get(word, 0) + 1
    ids = (study.jobs.ids() if isinstance(study.jobs, PlannedJobs) else list(study.jobs)) if rows else []
    return [ids[i] for i in rows[:NAMED_FAILED]], reasons


def write_runs_marker(study, runs: dict) -> None:
    """results/<study>/.runs-<digest> (hbvm_workflow.layout.runs_marker): the set of runs the manifest is of
    (``runs``: their hashes, or a sharded store's number of runs: the store holds each run's hash as a coordinate);
    the study's markers of other sets are removed."""

    path = runs_marker(study.results, study.name, study.runs_digest())
    prefix = os.path.basename(runs_marker(study.results, study.name, ""))
    for name in os.listdir(study.dir):
        if name.startswith(prefix) and name != os.path.basename(path):
            os.remove(os.path.join(study.dir, name))
    with open(path + ".tmp", "w") as fh:
        json.dump(runs, fh)
        fh.write("\n")
    os.replace(path + ".tmp", path)


class RunStores:
    """``save: trajectory``: a store per run (``storage``); its runs are the tasks of ``dispatch.compute``."""

    def __init__(self, study) -> None:
        self.study = study
        self.summary: dict = {}  # job id -> its summary (reused, then computed)

    def prepare(self, retry_failed: bool, log: logging.Logger) -> tuple[list, list[dict]]:
        """(runs to compute, shard specs: none); the reused runs' summaries kept."""
        todo, self.summary = reuse(self.study, retry_failed, log)
        return todo, []

    def finish(self, path: str, elapsed: float, workers: str, log: logging.Logger) -> None:
        """The manifest, the runs marker and the closing line."""
        m = write_manifest(self.study, self.summary, path)
        write_runs_marker(self.study, self.study.job_hashes())
        log.info(
            f"done in {elapsed:.1f} s: {len(m['computed'])} computed, "
            f"{len(m['jobs']) - len(m['computed'])} reused, {len(m['failed'])} failed{workers}"
        )

    def aggregate(self, zarr: str, csv: str, timings: str, workers: int, log: logging.Logger) -> list[dict]:
        """errors.zarr, errors.csv and timings.csv from the run stores (``tables.compute_errors``)."""

        return compute_errors(self.study, zarr, csv, timings, workers)

    # what a solved study's manifest (results/<study>/solve.json, ``record``; ``base``: its folder) says of it
    def counts(self, record: dict) -> dict[str, int]:
        """Its runs computed (by the last solve), reused, failed, damaged, missing: each store's state."""

        out = dict.fromkeys(("computed", "reused", "failed", "damaged", "missing"), 0)
        computed = set(record.get("computed", []))
        for job in self.study.jobs.values():
            status, _ = store_state(job.store, Expected.of_job(job))
            if status == "complete":
                out["computed" if job.id in computed else "reused"] += 1
            elif status == "failed":
                out[status] += 1
            elif status in ("damaged", "altered"):  # altered: its attrs edited (``verify`` counts it damaged too)
                out["damaged"] += 1
            else:  # missing, stale (computed for other parameters): to compute
                out["missing"] += 1
        return out

    @staticmethod
    def missing(record: dict, base: str) -> list[tuple[str, str]]:
        """(store, run id) of each run listed as done (status ok) whose store is not there."""
        out = []
        for job in record["jobs"]:
            store = os.path.join(base, job.get("store", ""))
            if job.get("status") == "ok" and not os.path.lexists(store):
                out.append((store, str(job.get("id"))))
        return out

    @staticmethod
    def damaged(record: dict, base: str) -> list[tuple[str, str, str]]:
        """(run id, store, what) of each run listed as done whose store is not the file the solve step wrote: its
        size or modification time differs from the record (os.stat only); such a store is then checked in full
        (``storage.corruption``: every chunk read and its checksums checked), and ``what`` names the array and
        the damage, or is "changed" for an intact store (copied, touched, replaced). Without a recorded
        signature (an older manifest) only missing or truncated chunks count."""

        out = []
        for j in record["jobs"]:
            store = os.path.join(base, j["store"])
            if j.get("status") != "ok" or (j.get("stat") and j["stat"] == file_signature(store)):
                continue
            attrs = read_attrs(store)
            ours = attrs is not None and attrs.get("format") == FORMAT
            found = (corruption(store, attrs) if j.get("stat") else damage(store, attrs)) if ours else None
            if found is not None:
                array, what = found
                out.append((j["id"], store, f"{f'array {array}: ' if array else ''}{what}"))
            elif j.get("stat") and os.path.exists(store):  # edited, replaced, of another format (gone: lost_runs)
                out.append((j["id"], store, "changed"))
        return out

    @staticmethod
    def open(record: dict, base: str, study: str, results: str, chunks: dict | None):
        """An ``xarray.DataTree``: errors.zarr at the root, a lazily opened Dataset per stored run below its label
        (``reading.open_study``)."""

        import xarray as xr

        nodes: dict = {}
        nodes["/"] = open_errors(study, results) if Path(errors_zarr(results, study)).exists() else xr.Dataset()
        for job in record["jobs"]:
            store = Path(base) / job["store"]
            if job["status"] == "ok" and store.exists():
                # /<label>/<run>, or /<label>/<combo>/<run> in a study with a grid (the store's folders under runs/)
                parts = Path(job["store"]).parts
                inner = parts[parts.index("runs") + 1 :] if "runs" in parts else (job["label"], store.name)
                nodes["/" + "/".join(inner).removesuffix(".zip").removesuffix(".zarr")] = open_trajectory(
                    str(store), chunks=chunks
                )
        tree = xr.DataTree.from_dict(nodes)
        tree.attrs.update({"study": study, "results": str(results)})
        return tree


class ShardedStore:
    """``save: summary``: one sharded store of all the runs (``shards``); its shards are the tasks."""

    def __init__(self, study) -> None:
        self.study = study
        self.summary: dict = {}  # "reused", "copied", "failed_reused"; "shards": the shard tasks' results
        self.table = None

    def prepare(self, retry_failed: bool, log: logging.Logger) -> tuple[list, list[dict]]:
        """(runs: none, a spec per shard to compute); the store created or reused (``shards.prepare``)."""

        self.table, pending, self.summary = shards.prepare(self.study, retry_failed, log)
        return [], [shards.shard_spec(self.study, self.table, shard) for shard in pending]

    def finish(self, path: str, elapsed: float, workers: str, log: logging.Logger) -> None:
        """The manifest, the runs marker and the closing line (with the backends the shards ran on)."""
        m = write_shard_manifest(self.study, self.table, self.summary, path)
        write_runs_marker(self.study, {"runs": len(self.study.jobs)})
        backends = sorted({r["backend"] for r in self.summary.get("shards", []) if r["computed"]})
        log.info(
            f"done in {elapsed:.1f} s: {m['computed']} computed, {m['copied']} copied, "
            f"{m['reused']} reused, {m['failed']} failed"
            + (f" (on {', '.join(backends)})" if backends else "")
            + workers
        )

    def aggregate(self, zarr: str, csv: str, timings: str, workers: int, log: logging.Logger) -> list[dict]:
        """errors.zarr, errors.csv and timings.csv over the store's run dimension at once, from the shards' partial
        results (``ensemble_errors.compute_summary_errors``; a shard computed again is said on ``log``)."""

        return compute_summary_errors(self.study, zarr, csv, timings, workers, tell=log.info)

    # what a solved study's manifest (results/<study>/solve.json, ``record``; ``base``: its folder) says of it
    def counts(self, record: dict) -> dict[str, int]:
        """Its runs computed, reused, failed (the manifest's counts where it is of these runs and the store is
        complete), else all missing."""

        out = dict.fromkeys(("computed", "reused", "failed", "damaged", "missing"), 0)
        runs = len(self.study.jobs)
        if record.get("runs") == runs and complete(shard_store(self.study.results, self.study.name)):
            out.update(computed=record.get("computed", 0), failed=record.get("failed", 0))
            out["reused"] = runs - out["computed"] - out["failed"]
        else:
            out["missing"] = runs
        return out

    @staticmethod
    def missing(record: dict, base: str) -> list[tuple[str, str]]:
        """[(store, what)] where the store is not there."""
        store = os.path.join(base, record["store"])
        return [] if os.path.lexists(store) else [(store, f"(the store of {record.get('runs')} runs)")]

    @staticmethod
    def damaged(record: dict, base: str) -> list[tuple[str, str, str]]:
        """(what, store, why) of each damaged shard (``shards.damaged_shards``)."""

        return damaged_shards(record, base)

    @staticmethod
    def open(record: dict, base: str, study: str, results: str, chunks: dict | None):
        """The sharded store as one Dataset over ``run`` (``shards.open_shards``)."""

        return open_shards(os.path.join(base, record["store"]), chunks=chunks)


def store_kind(study) -> RunStores | ShardedStore:
    """The kind of store of a study's runs (its ``save``)."""
    return ShardedStore(study) if study.cfg.get("save") == "summary" else RunStores(study)


def recorded_kind(record: dict) -> type[RunStores] | type[ShardedStore]:
    """The kind of store a solved study's manifest is of (its ``save``, written by ``finish``)."""
    return ShardedStore if record.get("save") == "summary" else RunStores
