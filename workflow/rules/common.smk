# Config checks and study expansion, before any job runs: a bad key or value
# stops the workflow here with a one-line message naming it.
import json
import os
import re
import sys

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from hbvm_core.errors import ConfigError
from hbvm_workflow.config import load_studies
from hbvm_workflow.study import solve_workers

# User problems given as module.path:factory may live in the working directory.
if os.getcwd() not in sys.path:
    sys.path.insert(0, os.getcwd())

try:
    STUDIES = load_studies(config)  # validated once (defaults filled in), one line naming a bad key
except ConfigError as exc:
    # one line and a non-zero exit, not Snakemake's "WorkflowError in file ..., line ..." around it
    print(f"bad config: {exc}", file=sys.stderr, flush=True)
    sys.exit(1)

RESULTS = config["results"]  # filled in by the schema default
SELECTED = config.get("select") or list(STUDIES)


wildcard_constraints:
    study="|".join(re.escape(name) for name in STUDIES),


def convergence_targets(name):
    d = f"{RESULTS}/{name}"
    tables = [f"{d}/errors.csv", f"{d}/errors.zarr", f"{d}/table.md", f"{d}/table.tex", f"{d}/table.html"]
    return tables + [f"{d}/{name}.png", f"{d}/{name}.pdf"]


# Targets of each study kind; further kinds register theirs here.
STUDY_TARGETS = {"convergence": convergence_targets}


def all_targets():
    return [t for name in SELECTED for t in STUDY_TARGETS[STUDIES[name].kind](name)]


def default_studies():
    """The studies of the default target, in config order: rules solve and aggregate build them together,
    one job each for all of them (one Python start-up, one Dask cluster); other studies asked for by name
    (`snakemake beyond`, a file of a study not selected) get one solve_study / aggregate_study job each."""
    return [name for name in SELECTED if STUDY_TARGETS[STUDIES[name].kind](name)]


def study_regex(names):
    """A wildcard constraint matching exactly ``names`` (nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def study_params(wildcards):
    """Everything that defines a study's tables and plot: a change reruns them."""
    return STUDIES[wildcards.study].cfg


def solve_threads(names, share=1.0):
    """Local workers of the solve job of the studies ``names`` (hbvm_workflow.study.solve_workers: by their
    estimated work, and ``share`` of --cores); dask.n_workers fixes them; one thread when an external
    scheduler does the work."""
    dask = config.get("dask") or {}
    if dask.get("address") or dask.get("scheduler_file") or dask.get("cluster") == "slurm":
        return 1
    if dask.get("n_workers"):
        return int(dask["n_workers"])
    try:
        cores = workflow.cores
    except WorkflowError:  # no --cores (a dry run, --jobs with an executor): Snakemake caps the threads
        cores = os.cpu_count() or 1
    return solve_workers([j for name in names for j in STUDIES[name].jobs.values()], cores, share)


def study_solve_threads(wildcards):
    """solve_study: one study's share of the work of the studies asked for by name (all but the default ones)."""
    others = [n for n in STUDIES if n not in default_studies()]
    work = {n: sum(j.estimated_seconds() for j in STUDIES[n].jobs.values()) for n in others}
    share = work.get(wildcards.study, 0.0) / max(sum(work.values()), 1e-9)
    return solve_threads([wildcards.study], share)


def lost_runs(name):
    """Runs that the study's manifest lists as done but whose store has gone (deleted by hand)."""
    from hbvm_workflow.layout import manifest_path

    path = manifest_path(RESULTS, name)
    try:
        with open(path) as fh:
            jobs = json.load(fh)["jobs"]
    except (OSError, ValueError, KeyError):
        return []
    base = os.path.dirname(path)
    return [j["id"] for j in jobs if j.get("status") == "ok" and not os.path.exists(os.path.join(base, j["store"]))]


def damaged_runs(name):
    """(run id, "damaged" | "changed") for each run of the study's manifest whose store is not the file the
    solve step wrote: its size or modification time differs from the manifest's record (os.stat only), and
    then damaged when a recorded chunk is missing or of another size (hbvm_workflow.storage.damage), else
    changed. Without a recorded signature (an older manifest) only damage counts."""
    from hbvm_workflow.layout import manifest_path
    from hbvm_workflow.storage import FORMAT, damage, file_signature, read_attrs

    path = manifest_path(RESULTS, name)
    try:
        with open(path) as fh:
            jobs = json.load(fh)["jobs"]
    except (OSError, ValueError, KeyError):
        return []
    out = []
    for j in jobs:
        store = os.path.join(os.path.dirname(path), j["store"])
        if j.get("status") != "ok" or (j.get("stat") and j["stat"] == file_signature(store)):
            continue
        attrs = read_attrs(store)
        if attrs is not None and attrs.get("format") == FORMAT and damage(store, attrs) is not None:
            out.append((j["id"], "damaged"))
        elif j.get("stat") and os.path.exists(store):  # edited, replaced, of another format (a gone one: lost_runs)
            out.append((j["id"], "changed"))
    return out
