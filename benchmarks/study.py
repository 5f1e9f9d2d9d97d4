"""Wall time of the published study through Snakemake, and the 1-vs-2-worker scaling of a study of equal jobs.

    python -m benchmarks.study [--json] [--skip-published] [--skip-scaling] [--cold] [--jobs 20]

published: ``snakemake --cores 2`` on the seven published studies (table1-4,
fig1-3) in a fresh working directory (a clean results folder), timed from
start to finish. With the kernel cache warm (the default: the shipped
problems' loops compiled once, e.g. by ``python -m hbvm_core kernels warm``,
which this runs first, untimed) -- or, with --cold, with empty numba and
kernel caches (NUMBA_CACHE_DIR, HBVM_KERNEL_CACHE in a temporary folder), so
that the compiles are part of the time.

scaling: ``--jobs`` equal runs (HBVM(6,2), tethered satellites, h = 0.1,
2 * 10^5 steps, every 10th point stored) through ``hbvm_workflow.worker.solve_job``
on a LocalCluster (``hbvm_workflow.cluster.dask_client``) of 1 and of 2 worker
processes; each store is written by its worker. Timed from the first submit to
the last result (the cluster start is reported apart); the kernel is compiled
or loaded before the workers fork, as the workflow's solve rule does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._common import machine, timed_snakemake

PUBLISHED = ["table1", "table2", "table3", "table4", "fig1", "fig2", "fig3"]


def published(cold: bool = False) -> dict:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        if cold:
            env["NUMBA_CACHE_DIR"] = os.path.join(tmp, "numba-cache")
            env["HBVM_KERNEL_CACHE"] = os.path.join(tmp, "kernel-cache")
        else:
            warm = [sys.executable, "-m", "hbvm_core", "kernels", "warm"]
            subprocess.run(warm, check=True, env=env, capture_output=True)
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        select = f"select=[{','.join(PUBLISHED)}]"
        wall = timed_snakemake(work, "--config", select, env=env)
        outputs = sorted(str(p.relative_to(work)) for p in Path(work, "results").glob("*/table.md"))
        figures = sorted(str(p.relative_to(work)) for p in Path(work, "results").glob("*/*.png"))
    return {
        "benchmark": "published_study",
        "load_average_after": os.getloadavg()[0],
        "command": f"snakemake --cores 2 --config {select} all",
        "kernel_cache": "cold" if cold else "warm",
        "wall_s": wall,
        "tables": outputs,
        "figures": figures,
    }


def _job_list(n: int, folder: str):
    from hbvm_workflow.runs import Job

    return [
        Job(
            study="scaling",
            label=f"job{i}",
            name="HBVM(6,2)",
            problem="tethered_satellites",
            params={},
            method={"k": 6, "s": 2},
            h=0.1,
            t_end=20_000.0,
            save_every=10,
            store=os.path.join(folder, f"job{i}.zarr"),
        )
        for i in range(n)
    ]


def timed_solve(job: dict) -> dict:
    """solve_job, plus the CPU time the worker spent on it (to tell lack of cores from lack of scaling)."""
    from hbvm_workflow.worker import solve_job

    c0 = time.process_time()
    res = solve_job(job)
    return {**res, "cpu_s": time.process_time() - c0}


def scaling(n_jobs: int = 20) -> dict:
    from distributed import wait

    from hbvm_workflow.cluster import dask_client
    from hbvm_workflow.worker import warm_up

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            jobs = _job_list(n_jobs, os.path.join(tmp, f"w{workers}"))
            warm_up(jobs)
            t0 = time.perf_counter()
            with dask_client({"n_workers": workers}, threads=workers) as client:
                start = time.perf_counter() - t0
                t1 = time.perf_counter()
                load0 = os.getloadavg()[0]
                futures = [client.submit(timed_solve, job.as_dict(), pure=False) for job in jobs]
                wait(futures)
                results = client.gather(futures)
                wall = time.perf_counter() - t1
            bad = [r for r in results if r["status"] != "ok"]
            if bad:
                raise RuntimeError(f"{len(bad)} scaling jobs failed: {bad[0]}")
            rows[workers] = {
                "wall_s": wall,
                "cluster_start_s": start,
                "job_wall_s_mean": sum(r["wall_s"] for r in results) / len(results),
                "job_cpu_s_mean": sum(r["cpu_s"] for r in results) / len(results),
                "workers_used": len({r["worker"] for r in results}),
                "load_average_before": load0,
                "load_average_after": os.getloadavg()[0],
            }
    return {
        "benchmark": "scaling",
        "jobs": n_jobs,
        "job": "tethered_satellites HBVM(6,2) h=0.1, 2e5 steps, save_every=10, Zarr store per job",
        "one_worker_s": rows[1]["wall_s"],
        "two_workers_s": rows[2]["wall_s"],
        "speedup": rows[1]["wall_s"] / rows[2]["wall_s"],
        # how much CPU the workers got: sum of job CPU time over (workers x wall); 1 = every worker had a core
        "cpu_share": {w: n_jobs * r["job_cpu_s_mean"] / (w * r["wall_s"]) for w, r in rows.items()},
        "detail": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--skip-published", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--cold", action="store_true", help="time the published study with empty kernel caches too")
    ap.add_argument("--jobs", type=int, default=20)
    args = ap.parse_args(argv)
    rows = []
    if not args.skip_published:
        rows.append(published(cold=False))
        if args.cold:
            rows.append(published(cold=True))
    if not args.skip_scaling:
        rows.append(scaling(args.jobs))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"machine: {machine()}")
    for r in rows:
        if r["benchmark"] == "published_study":
            print(f"published study ({r['kernel_cache']} kernel cache): {r['wall_s']:.1f} s  [{r['command']}]")
        else:
            print(
                f"{r['jobs']} equal jobs: 1 worker {r['one_worker_s']:.1f} s, 2 workers {r['two_workers_s']:.1f} s, "
                f"speedup {r['speedup']:.2f}; CPU share per worker {r['cpu_share'][1]:.2f} (1 worker), "
                f"{r['cpu_share'][2]:.2f} (2 workers)  ({r['job']})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
