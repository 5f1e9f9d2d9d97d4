"""Rule aggregate: the numbers of one solved study -> errors.zarr, errors.csv and timings.csv (each run's wall
time, backend, worker). Rule render (workflow/scripts/render.py) lays them out as tables and the figure.

A large study's runs are read in the job's threads (processes forked from this one).
"""

import time


def aggregate_study(
    name: str, config: dict, out, log_path: str, workers: int = 1, numbers=None, marker: str | None = None
) -> str:
    """errors.zarr, errors.csv and timings.csv of one study; returns a one-line summary. ``numbers`` (the rule's
    param: the study's keys that define its numbers) and ``marker`` (its input: the marker of the study's runs,
    ``layout.runs_marker``) are checked against the plan."""
    import os

    from hbvm_workflow.layout import runs_marker
    from hbvm_workflow.plan import check_planned, planned_studies
    from hbvm_workflow.script_support import plural, study_logger
    from hbvm_workflow.storage import clean_temporaries
    from hbvm_workflow.store_kinds import store_kind
    from hbvm_workflow.study import number_config

    log = study_logger("aggregate", name, log_path)
    t0 = time.perf_counter()
    study = planned_studies(config, [name])[name]  # the parse's expansion (hbvm_workflow.plan)
    if numbers is not None:
        check_planned(study, "its entry", numbers, number_config(study.cfg))
    if marker:
        planned = runs_marker(study.results, name, study.runs_digest())
        check_planned(study, "its runs", os.path.basename(marker), os.path.basename(planned))
    for p in clean_temporaries(study.dir):  # e.g. the errors.zarr of a killed aggregation
        log.info(f"removed the leftover temporary {p}")
    rows = store_kind(study).aggregate(out.zarr, out.csv, out.timings, workers, log)
    failed = sum(r["status"] != "ok" for r in rows)
    log.info(f"aggregated {plural(len(rows), 'row')} ({failed} not ok) in {time.perf_counter() - t0:.2f} s")
    return f"{name}: {plural(len(rows), 'row')}, {failed} not ok"


def main(smk) -> None:
    from hbvm_workflow.script_support import as_list, job_locks, one_line_errors

    name = smk.wildcards.study
    with one_line_errors(smk.log), job_locks(smk.config, [name]):
        # the rule's param and runs marker (none when called by hand, or for a study of solve_study)
        numbers = getattr(getattr(smk, "params", None), "numbers", None)
        markers = as_list(getattr(getattr(smk, "input", None), "runs", None) or [])
        workers = max(1, int(smk.threads))
        aggregate_study(name, smk.config, smk.output, smk.log[0], workers, numbers, markers[0] if markers else None)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821
