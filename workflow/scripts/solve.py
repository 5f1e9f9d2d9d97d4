"""Rule solve: compute the missing runs of one study on a Dask cluster, then write its manifest.

A run whose store is complete for the same parameter hash (or that failed
before, unless retry_failed) is reused; every other run is submitted to Dask
(longest first, retried on worker loss) and written atomically by the worker.
"""

import json
import logging
import os
import sys
import time

# One BLAS/OpenMP thread here and in the (forked) workers: the workers are the parallelism.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"


def setup_logging(path: str, study: str) -> logging.Logger:
    log = logging.getLogger(f"hbvm.solve.{study}")
    log.setLevel(logging.INFO)
    fmt = logging.Formatter(f"%(asctime)s [{study}] %(message)s", "%H:%M:%S")
    for handler in (logging.FileHandler(path, mode="w"), logging.StreamHandler(sys.stderr)):
        handler.setFormatter(fmt)
        log.addHandler(handler)
    return log


def describe(res: dict) -> str:
    if res["status"] == "ok":
        return (
            f"ok, {res['steps']} steps, {res['mean_iterations']:.2f} it/step, "
            f"{res['wall_s']:.2f} s ({res.get('backend', '?')})"
        )
    err = res.get("error") or {}
    return f"FAILED: {err.get('message', err)}"


def main(smk) -> None:
    from distributed import as_completed

    from hbvm_core.cluster import dask_client, forks_local_workers
    from hbvm_core.cluster import describe as where
    from hbvm_core.storage import clean_temporaries, read_attrs, read_failure, store_status
    from hbvm_core.study import expand_study, solve_job, warm_up

    config = smk.config
    name = smk.wildcards.study
    study = expand_study(name, config["studies"][name], results=config.get("results", "results"))
    log = setup_logging(smk.log[0], name)
    t0 = time.perf_counter()
    for p in clean_temporaries(os.path.join(study.dir, "runs")):
        log.info(f"removed the leftover temporary {p}")

    retry_failed = bool(config.get("retry_failed", False))
    todo, summary = [], {}
    for job in study.jobs.values():
        status = store_status(job.store, job.hash)
        if status == "complete":
            a = read_attrs(job.store)
            summary[job.id] = {"status": "ok", "steps": a["steps"], "wall_s": a.get("wall_s"), "computed": False}
        elif status == "failed" and not retry_failed:
            fail = read_failure(job.store) or {}
            summary[job.id] = {"status": "failed", "steps": job.steps, "error": fail.get("error"), "computed": False}
        else:
            todo.append(job)
    log.info(f"{len(study.jobs)} runs: {len(summary)} reused, {len(todo)} to compute")

    errors = []
    if todo:
        dask_cfg = config.get("dask") or {}
        log.info(f"computing on {where(dask_cfg, smk.threads)}")
        if forks_local_workers(dask_cfg):
            t1 = time.perf_counter()
            n = warm_up(todo)
            dt = time.perf_counter() - t1
            log.info(f"kernels of {n} (problem, method) pairs ready in {dt:.1f} s (the forked workers inherit them)")
        with dask_client(dask_cfg, threads=min(smk.threads, len(todo)), tasks=len(todo)) as client:
            order = sorted(todo, key=lambda j: -j.cost())
            futures = {
                client.submit(
                    solve_job,
                    job.as_dict() | {"store": os.path.abspath(job.store)},
                    key=f"solve-{name}-{job.label}-h{job.h!r}-{job.hash}",
                    retries=int(dask_cfg.get("retries", 2)),
                    pure=False,
                ): job
                for job in order
            }
            done = 0
            for fut in as_completed(futures):
                job = futures[fut]
                done += 1
                try:
                    res = fut.result()
                except Exception as exc:  # a bug or a lost worker after the retries: report every one
                    errors.append(f"{job.id}: {type(exc).__name__}: {exc}")
                    log.error(f"{done}/{len(todo)} {job.id}: ERROR {type(exc).__name__}: {exc}")
                    continue
                summary[job.id] = {k: res.get(k) for k in ("status", "steps", "wall_s", "mean_iterations", "error")}
                summary[job.id]["computed"] = True
                log.info(f"{done}/{len(todo)} {job.id}: {describe(res)}")
        # every run has finished: what is left is a lost worker's partial store
        for p in clean_temporaries(os.path.join(study.dir, "runs")):
            log.info(f"removed the temporary {p} of a lost worker")
    if errors:
        raise RuntimeError(f"study {name}: {len(errors)} run(s) raised: " + "; ".join(errors))

    jobs = []
    for job in study.jobs.values():
        s = summary[job.id]
        jobs.append(
            {
                "id": job.id,
                "label": job.label,
                "name": job.name,
                "h": job.h,
                "t_end": job.t_end,
                "store": os.path.relpath(job.store, study.dir),
                "hash": job.hash,
                **s,
            }
        )
    computed = [j["id"] for j in jobs if j["computed"]]
    failed = [j["id"] for j in jobs if j["status"] == "failed"]
    manifest = {"study": name, "jobs": jobs, "computed": computed, "failed": failed}
    tmp = smk.output.manifest + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, smk.output.manifest)
    log.info(
        f"done in {time.perf_counter() - t0:.1f} s: {len(computed)} computed, "
        f"{len(jobs) - len(computed)} reused, {len(failed)} failed"
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821
