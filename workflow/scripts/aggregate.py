"""Rules aggregate / aggregate_study: errors and rates of solved studies -> errors.zarr, errors.csv,
table.md/.tex/.html, timings.csv (each run's wall time, backend, worker), and each study's figure
<study>.png/.pdf.

The imports (matplotlib, xarray, zarr, scipy: seconds) are paid once; with more
than one study and thread, the studies are aggregated side by side in processes
forked from this one (each logs to logs/<study>/aggregate.log).
"""

import time

#: the outputs of one study, by their names in the rule (aggregate_outputs in workflow/rules/aggregate.smk)
OUTPUTS = ("zarr", "csv", "timings", "md", "tex", "html", "png", "pdf")


def aggregate_study(name: str, config: dict, out: dict, log_path: str, workers: int = 1) -> str:
    """Tables and figure of one study (its runs read in ``workers`` processes); returns a one-line summary."""
    from hbvm_workflow.config import load_studies
    from hbvm_workflow.figures import study_plot
    from hbvm_workflow.jobs import plural, study_logger
    from hbvm_workflow.storage import clean_temporaries
    from hbvm_workflow.tables import aggregate

    log = study_logger("aggregate", name, log_path)
    t0 = time.perf_counter()
    study = load_studies(config, names=[name])[name]
    for p in clean_temporaries(study.dir):  # e.g. the errors.zarr of a killed aggregation
        log.info(f"removed the leftover temporary {p}")
    rows = aggregate(study, out["zarr"], out["csv"], out["md"], out["tex"], out["html"], out["timings"], workers)
    failed = sum(r["status"] != "ok" for r in rows)
    t1 = time.perf_counter()
    log.info(f"aggregated {plural(len(rows), 'row')} ({failed} not ok) in {t1 - t0:.2f} s")
    study_plot(study, out["zarr"], out["png"], out["pdf"])
    log.info(f"{study.plot} plot written in {time.perf_counter() - t1:.2f} s")
    return f"{name}: {plural(len(rows), 'row')}, {failed} not ok"


def main(smk) -> None:
    from hbvm_workflow.jobs import job_locks, one_line_errors

    with one_line_errors(smk.log), job_locks(smk.config, list(smk.params.studies)):
        aggregate_all(smk)


def aggregate_all(smk) -> None:
    """The aggregate step of the studies of the job, holding their locks."""
    import matplotlib

    matplotlib.use("Agg")
    import xarray  # noqa: F401

    import hbvm_workflow.plots  # noqa: F401  (the imports, here, before the studies' processes fork)
    import hbvm_workflow.tables  # noqa: F401
    from hbvm_workflow.cluster import default_start_method
    from hbvm_workflow.jobs import as_list

    names = list(smk.params.studies)
    outs = {key: as_list(getattr(smk.output, key)) for key in OUTPUTS}
    args = [
        (name, smk.config, {k: outs[k][i] for k in OUTPUTS}, log)
        for i, (name, log) in enumerate(zip(names, as_list(smk.log)))
    ]
    workers = min(len(args), max(1, int(smk.threads)))
    if workers == 1:  # one study (its runs read in the job's threads), or one thread
        errors = [aggregate_one(*a, workers=max(1, int(smk.threads)) if len(args) == 1 else 1) for a in args]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # zarr's event loop thread must not exist yet when the processes fork: nothing above has started it
        ctx = multiprocessing.get_context(default_start_method())
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [pool.submit(aggregate_one, *a) for a in args]
            errors = []
            for fut, a in zip(futures, args):
                try:
                    errors.append(fut.result())
                except Exception as exc:  # noqa: BLE001 - the process itself died (killed): that study only
                    errors.append(f"{a[0]}: {type(exc).__name__}: {exc}")
    errors = [e for e in errors if e]
    if errors:
        from hbvm_core.errors import HBVMError

        raise HBVMError(f"{len(errors)} of {len(args)} studies failed to aggregate: " + "; ".join(errors))


def aggregate_one(name: str, config: dict, out: dict, log_path: str, workers: int = 1) -> str | None:
    """``aggregate_study``; what it raised as one line naming the study (its traceback to the study's log), None
    when it succeeded. Only this string crosses from a study's process to the job's: every failure is reported
    as itself, and no other study is marked failed."""
    import traceback

    try:
        aggregate_study(name, config, out, log_path, workers)
    except Exception as exc:  # noqa: BLE001 - reported per study by aggregate_all
        with open(log_path, "a") as fh:
            fh.write(traceback.format_exc())
        return f"{name}: {type(exc).__name__}: {' '.join(str(exc).split())}"
    return None


if __name__ == "__main__":
    main(snakemake)  # noqa: F821
