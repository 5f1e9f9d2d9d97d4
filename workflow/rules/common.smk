# Config checks and study expansion, before any job runs: a bad key or value
# stops the workflow here with a one-line message naming it. The expansion is
# written as the run's plan (hbvm_workflow.plan), which the jobs read.
#
# This file holds every function of the workflow and defines no rule (`snakemake --lint` wants them
# apart); the other files hold the rules. Every path comes from hbvm_workflow.layout, as a call such as
# layout.manifest_path(RESULTS, "{study}") in a pattern, or as another rule's output.
import functools
import gc
import json
import os
import re
import sys

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from hbvm_core.errors import ConfigError
from hbvm_workflow import layout
from hbvm_workflow.cluster import study_spreads
from hbvm_workflow.loading import load_studies
from hbvm_workflow.pages import small_pages
from hbvm_workflow.kinds import KINDS as STUDY_KINDS
from hbvm_workflow.plan import planned_studies, write_plan
from hbvm_workflow.runs import work_seconds, workers_for
from hbvm_workflow.summary_job import aggregated_in_solve

# The cores of the whole run (--cores), for the solve jobs' first compile of new loops: a job compiles its cold
# loops in up to this many processes side by side (hbvm_workflow.worker.compile_processes), a one-off that the
# job's own threads (sized by its runs' work) would otherwise serialise. Jobs inherit it (local and SLURM).
try:
    os.environ.setdefault("HBVM_COMPILE_PROCESSES", str(workflow.cores))
except WorkflowError:  # no --cores (a dry run, --jobs with an executor): each job's own threads
    pass

# Transparent huge pages off for the jobs and their Dask workers, which inherit it (hbvm_workflow.pages).
small_pages()

# User problems given as module.path:factory may live in the working directory.
if os.getcwd() not in sys.path:
    sys.path.insert(0, os.getcwd())

try:
    if workflow.is_main_process:
        # the config expanded once for the whole run (validated, defaults filled in; one line naming a bad key),
        # written as the plan that every job reads (hbvm_workflow.plan) when jobs are about to run (onstart)
        STUDIES = load_studies(config)
    else:  # a job's own parse (a cluster or subprocess job): the main process's plan
        STUDIES = planned_studies(config)
except ConfigError as exc:
    # one line and a non-zero exit, not Snakemake's "WorkflowError in file ..., line ..." around it
    print(f"bad config: {exc}", file=sys.stderr, flush=True)
    sys.exit(1)


# The objects of the parse (Snakemake's and the studies': some 10^6 for a 10^5-run sweep) kept out of the garbage
# collector's passes from here on: they live until Snakemake exits, and each full pass walked them all, the one at
# the interpreter's exit too (0.45 s at the end of a 10^5-run sweep).
gc.freeze()


onstart:
    # not in a dry run, --lint or when nothing is to be done: only jobs about to run read the plan
    write_plan(config, STUDIES)


RESULTS = config["results"]  # filled in by the schema default
SELECTED = config.get("select") or list(STUDIES)


wildcard_constraints:
    study="|".join(re.escape(name) for name in STUDIES),


def study_targets(name):
    """The files of a study (its kind's entry in hbvm_workflow.kinds.KINDS)."""
    return STUDY_KINDS[STUDIES[name].study_kind].targets(RESULTS, name)


def default_targets(name):
    """A selected study's files in the default target: every kind's, the opt-in ones' only when asked for."""
    kind_def = STUDY_KINDS[STUDIES[name].study_kind]
    return kind_def.targets(RESULTS, name) if kind_def.in_default(name, config) else []


# Targets of the default target besides the studies' own (the beyond summaries: rules/beyond.smk).
EXTRA_DEFAULT_TARGETS = []


def all_targets():
    return [t for name in SELECTED for t in default_targets(name)] + [t for f in EXTRA_DEFAULT_TARGETS for t in f()]


def default_studies():
    """The studies of the default target, in config order: rules solve and aggregate build them together,
    one job each for all of them (one Python start-up, one Dask cluster); other studies asked for by name
    (`snakemake beyond`, a file of a study not selected) get one solve_study / aggregate_study job each."""
    return [name for name in SELECTED if default_targets(name)]


def solved_together():
    """The studies computed by the one job of the solve rule (the default target's), unless the config asks
    for one solve job per study (``solve_per_study``, set by the SLURM profile: a batch scheduler then spreads
    the studies' jobs over its nodes). The others get one solve_study job each, and a study with
    ``save: summary`` one solve_summary job, which aggregates it too."""
    return [] if config.get("solve_per_study") else [n for n in default_studies() if n not in summary_studies()]


def study_regex(names):
    """A wildcard constraint matching exactly ``names`` (nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def study_params(wildcards):
    """Everything that defines a study's tables and plot (all but where its runs were computed): a change reruns
    them."""
    from hbvm_workflow.study import shown_config

    return shown_config(STUDIES[wildcards.study].cfg)


def solve_threads(names, share=1.0):
    """Local workers of the solve job of the studies ``names`` (hbvm_workflow.runs.workers_for: by their
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
    runs = sum(len(STUDIES[name].jobs) for name in names)
    return workers_for(runs, sum(map(study_work, names)), cores, share)


def study_solve_threads(wildcards):
    """solve_study, solve_summary: one study's share of the work of the studies asked for by name (all but the
    default ones; for a summary study of the default target: of the default ones);
    with ``solve_per_study`` each study's job is sized by its own work (its own allocation on a cluster)."""
    return study_threads(wildcards.study)


@functools.cache  # once per study: Snakemake asks for a job's threads more than once
def study_threads(name):
    """study_solve_threads of the study ``name``: one for a study that spreads (its Dask workers are SLURM jobs of
    their own; hbvm_workflow.cluster.spreads)."""
    if study_spreads(config, STUDIES[name], study_work(name)):
        return 1
    if config.get("solve_per_study"):
        return solve_threads([name])
    default = default_studies()
    # a summary study of the default target (rule solve_summary) shares the cores with the default target's
    beside = default if name in default else [n for n in STUDIES if n not in default]
    share = 1.0 if beside == [name] else study_work(name) / max(sum(map(study_work, beside)), 1e-9)
    return solve_threads([name], share)


@functools.cache
def study_work(name):
    """The estimated seconds of a study's runs (hbvm_workflow.runs.work_seconds), once per study."""
    return work_seconds(STUDIES[name].jobs)


def lost_runs(name):
    """Runs that the study's manifest lists as done but whose store has gone (deleted by hand)."""
    path = layout.manifest_path(RESULTS, name)
    try:
        with open(path) as fh:
            jobs = json.load(fh)["jobs"]
    except (OSError, ValueError, KeyError):
        return []
    base = os.path.dirname(path)
    return [j["id"] for j in jobs if j.get("status") == "ok" and not os.path.exists(os.path.join(base, j["store"]))]


def damaged_runs(name):
    """(run id, store, what) for each run of the study's manifest whose store is not the file the solve step
    wrote, or each damaged shard of its sharded store (``store_kinds``: its kind of store's ``damaged``)."""
    from hbvm_workflow.store_kinds import recorded_kind

    path = layout.manifest_path(RESULTS, name)
    try:
        with open(path) as fh:
            manifest = json.load(fh)
        kind = recorded_kind(manifest)
    except (OSError, ValueError, AttributeError):
        return []
    try:
        return kind.damaged(manifest, os.path.dirname(path))
    except (KeyError, TypeError):  # a manifest without the records of its runs (edited, of an older layout)
        return []


# --------------------------------------------------------------------------- the rule files' functions
# The software of every job: workflow/envs/hbvm.yaml (relative to the rule files in workflow/rules/), used
# with --software-deployment-method conda (docs/workflow.md, "Software").
HBVM_ENV = "../envs/hbvm.yaml"


# rules/solve.smk
def summary_studies():
    """The studies that one solve_summary job each solves and aggregates (``save: summary``, one sharded store;
    hbvm_workflow.summary_job); the solve, solve_study and aggregate jobs build the others."""
    return [n for n in STUDIES if aggregated_in_solve(STUDIES[n].cfg)]


def solve_outputs(names):
    """Per study its manifest and the marker of its set of runs (hbvm_workflow.layout.runs_marker). (A study
    built by solve_study and later by solve reruns nothing; one built by solve and later by solve_study is
    solved once more, every run reused.)"""
    return {
        "manifest": [layout.manifest_path(RESULTS, name) for name in names],
        "runs": [layout.runs_marker(RESULTS, name, STUDIES[name].runs_digest()) for name in names],
    }


def studies_of(wildcards, output):
    """The studies of a solve job, from its outputs (a param derived from the outputs: Snakemake does not
    compare it with the last run's, as it does a plain param)."""
    paths = [output.manifest] if isinstance(output.manifest, str) else list(output.manifest)
    return [os.path.basename(os.path.dirname(path)) for path in paths]


def study_runs(wildcards):
    """The digest of one study's runs: a change reruns solve_study (a param of a job of one study, which no
    other study's choice changes)."""
    return STUDIES[wildcards.study].runs_digest()


# rules/aggregate.smk
def aggregate_threads(name):
    """One, and for a large study one per 500 runs (its runs are read in that many processes); Snakemake
    caps it at --cores."""
    return max(1, -(-len(STUDIES[name].jobs) // 500))


def number_params(wildcards):
    """The study's keys that define its numbers (everything but the presentation and provenance keys): a change
    reruns the aggregate rule."""
    from hbvm_workflow.study import number_config

    return number_config(STUDIES[wildcards.study].cfg)


def shown(path, caption, output):
    return report(path, caption=caption, category="{study}", labels={"study": "{study}", "output": output})


def runs_of(wildcards):
    """The marker of the study's current set of runs where the shared solve job builds it: a new set of runs
    (a changed job hash: another identity, a changed param) is a missing input, so that solve reruns and this
    study is aggregated again. A study of solve_study reruns by that rule's param instead."""
    name = wildcards.study
    return [layout.runs_marker(RESULTS, name, STUDIES[name].runs_digest())] if name in SOLVED_TOGETHER else []


# rules/beyond.smk
BEYOND_KINDS = tuple(name for name, kind_def in STUDY_KINDS.items() if kind_def.opt_in == "beyond")


def beyond_names(study_kind):
    return [n for n, s in STUDIES.items() if s.study_kind == study_kind]


def beyond_summary_targets():
    out = [
        layout.beyond_summary(RESULTS, study_kind, ext)
        for study_kind in BEYOND_KINDS
        if beyond_names(study_kind)
        for ext in layout.SUMMARIES
    ]
    return out + time_to_accuracy_targets()


def time_to_accuracy_targets():
    return [layout.time_to_accuracy_csv(RESULTS)] if beyond_names("work_precision") else []


def beyond_default_summaries():
    """The summaries, in the default target with config beyond: true (the studies' own files: their kind's entry)."""
    selected = any(STUDIES[n].study_kind in BEYOND_KINDS for n in SELECTED)
    return beyond_summary_targets() if config.get("beyond", False) and selected else []


# rules/sweep.smk
def sweep_names():
    return [n for n, s in STUDIES.items() if s.study_kind == "sweep"]
