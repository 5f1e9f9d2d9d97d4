"""The solve step (rules solve, solve_study, solve_summary): the missing runs of the studies computed on one Dask
cluster, then each study's manifest written (and a ``save: summary`` study's numbers aggregated, ``summary_job``).

A run whose store is complete for the same parameter hash (or that failed before, unless retry_failed) is reused;
the other runs and shards of every study are the tasks of one cluster (``dispatch.compute``); each study's kind of
store (``store_kinds``) prepares and finishes its own part. Each study logs to its own file (logs/<study>/solve.log)
and gets its own manifest results/<study>/solve.json.
"""

from __future__ import annotations

import shutil
import time

from hbvm_core.errors import BackendError, HBVMError

from . import summary_job
from .dispatch import NO_SPACE, choose_cluster, compute, took_part
from .layout import runs_marker
from .plan import check_planned, planned_studies
from .script_support import as_list, job_locks, one_line_errors, study_logger
from .store_kinds import store_kind


def main(smk) -> None:
    """The job of a Snakemake solve rule (``smk``: its ``snakemake`` object), holding its studies' locks; a full
    disk met here in one line (``no_space``)."""
    names = list(smk.params.studies)
    with one_line_errors(smk.log), job_locks(smk.config, names):
        try:
            solve(smk, names)
        except OSError as exc:  # a full disk here (a store created, a manifest): one line, as the shards' own
            said = no_space(exc, smk.config.get("results", "results"))
            if said is exc:
                raise
            raise said from None


def no_space(exc: OSError, results: str) -> BaseException:
    """An HBVMError of one line for a full disk (``NO_SPACE``) met by the solve process itself; any other error
    as it is."""
    if isinstance(exc, HBVMError) or exc.errno not in NO_SPACE:
        return exc
    try:
        free = f"{shutil.disk_usage(results).free / 1e6:.3g} MB free"
    except OSError:
        free = "free space unknown"
    where = exc.filename or results
    return HBVMError(
        f"no space left on the device while writing {where} ({free} in {results}); nothing of it was kept: free "
        "space, then run the same command again"
    )


def solve(smk, names: list) -> None:
    """The solve step of the studies ``names``, holding their locks."""
    config = smk.config
    manifests = dict(zip(names, as_list(smk.output.manifest)))
    solve_logs = getattr(smk.log, "solve", None) or smk.log  # named (solve, aggregate) in this workflow's rules
    logs = {name: study_logger("solve", name, path) for name, path in zip(names, as_list(solve_logs))}
    t0 = time.perf_counter()
    studies = planned_studies(config, names)  # the parse's expansion (hbvm_workflow.plan)
    markers = set(as_list(smk.output.runs)) if hasattr(smk.output, "runs") else set()
    aggregates = summary_job.job_outputs(smk)  # the summary studies this job aggregates
    for name, study in studies.items():  # the runs this job was given: the markers it writes, or its param
        found = study.runs_digest()
        expected = found if runs_marker(study.results, name, found) in markers else getattr(smk.params, "runs", None)
        check_planned(study, "its runs", expected, found)
        if name in aggregates:  # and the keys that define its numbers
            summary_job.check_numbers(study, getattr(smk.params, "numbers", None))

    retry_failed = bool(config.get("retry_failed", False))
    kinds = {name: store_kind(study) for name, study in studies.items()}
    todo, specs = [], []
    for name, kind in kinds.items():
        runs, shards = kind.prepare(retry_failed, logs[name])
        todo += runs
        specs += shards
    dask_cfg = choose_cluster(config, studies, specs, todo, logs)
    stops: dict = {}
    refused: dict = {}
    ran: dict = {}  # the Dask workers that computed something: address -> host
    computing = bool(todo or specs)
    summaries = {name: kind.summary for name, kind in kinds.items()}
    errors = (
        compute(todo, studies, logs, summaries, dask_cfg, smk.threads, specs, stops, refused, ran) if computing else []
    )
    if errors or stops or refused:  # one line (the solve step's log has every run's): no traceback on the terminal
        raised = [f"{len(errors)} run(s) raised: " + "; ".join(errors)] if errors else []
        raise (BackendError if stops else HBVMError)("; ".join([*stops.values(), *refused.values(), *raised]))
    workers = f"; {took_part(ran)}" if computing else ""
    for name, kind in kinds.items():
        kind.finish(manifests[name], time.perf_counter() - t0, workers, logs[name])
        if name in aggregates:  # its numbers, here: no job of their own (hbvm_workflow.summary_job)
            out = aggregates[name]
            summary_job.aggregate(
                studies[name], out["zarr"], out["csv"], out["timings"], out["log"], max(1, int(smk.threads))
            )
