"""A ``save: summary`` study is solved and aggregated by one job (rule solve_summary), in one process: the
aggregation runs right after the shards.

The study's errors.zarr, errors.csv and timings.csv are outputs of its solve job: the job has the plan, the imports and
the store at hand, so the aggregation costs no job of its own (a Snakemake job change, a Python start, the imports,
the plan read again: some 1.5 s of a 10^5-run sweep). What reruns is what reran the two jobs: the job's params, the
digest of its runs and the keys that define its numbers (``study.number_config``); a rerun reuses every complete
shard (no Dask cluster when none is left to compute) and aggregates again.
"""

from __future__ import annotations

import os
import time

from .plan import check_planned
from .script_support import as_list, plural, study_logger
from .storage import clean_temporaries
from .store_kinds import ShardedStore
from .study import Study, number_config


def aggregated_in_solve(cfg: dict) -> bool:
    """Whether a study entry is aggregated by its solve job: a sharded study (``save: summary``)."""
    return cfg.get("save") == "summary"


def aggregate(study: Study, zarr: str, csv: str, timings: str, log_path: str, workers: int = 1) -> str:
    """errors.zarr, errors.csv and timings.csv of a solved sharded study, as rule aggregate writes them
    (``store_kinds.ShardedStore.aggregate``), its line in the study's aggregate log; returns a one-line summary."""

    log = study_logger("aggregate", study.name, log_path)
    t0 = time.perf_counter()
    for p in clean_temporaries(study.dir):  # e.g. the errors.zarr of a killed aggregation
        log.info(f"removed the leftover temporary {p}")
    rows = ShardedStore(study).aggregate(zarr, csv, timings, workers, log)
    failed = sum(r["status"] != "ok" for r in rows)
    log.info(f"aggregated {plural(len(rows), 'row')} ({failed} not ok) in {time.perf_counter() - t0:.2f} s")
    return f"{study.name}: {plural(len(rows), 'row')}, {failed} not ok"


def job_outputs(smk) -> dict[str, dict[str, str]]:
    """Per summary study of a solve job (``smk``: its ``snakemake`` object): the paths of its zarr, csv, timings
    and aggregate log (none: the job aggregates no study)."""

    out: dict[str, dict[str, str]] = {}
    for key in ("zarr", "csv", "timings"):
        for path in as_list(getattr(smk.output, key, [])):
            out.setdefault(os.path.basename(os.path.dirname(path)), {})[key] = path
    for path in as_list(getattr(smk.log, "aggregate", [])):
        study = os.path.basename(os.path.dirname(path))
        if study in out:
            out[study]["log"] = path
    return out


def check_numbers(study: Study, numbers) -> None:
    """HBVMError (``plan.check_planned``) when the keys that define the study's numbers are not ``numbers``, those
    its job was given (its param; none: called by hand)."""

    if numbers is not None:
        check_planned(study, "its entry", numbers, number_config(study.cfg))
