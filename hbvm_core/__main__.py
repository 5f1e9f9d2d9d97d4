"""The compiled-kernel cache from the command line.

    python -m hbvm_core kernels warm [--solver fixed-point blended] [--problems NAME ...] [-j N]
    python -m hbvm_core kernels info
    python -m hbvm_core kernels clear

warm compiles (or finds in the cache) the loop of every built-in problem, one
process per problem and solver, N at a time (default: all cores), so that later
runs -- Snakemake jobs, Dask workers -- only load them. info lists the cache;
clear removes the generated modules and numba's cache of them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def _warm_one(args: tuple[str, str]) -> tuple[str, str, float]:
    name, solver = args
    import hbvm_core as hc

    t0 = time.perf_counter()
    pb = hc.get_problem(name)
    h = 0.01 if pb.period is None else pb.period / 100
    hc.integrate(pb, hc.HBVM(2, 1, solver=solver), h, h, backend="numba")
    return name, solver, time.perf_counter() - t0


def warm(problems: list[str], solvers: list[str], jobs: int) -> None:
    tasks = [(p, s) for p in problems for s in solvers]
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(tasks)))) as pool:
        for name, solver, dt in pool.map(_warm_one, tasks):
            print(f"{name:22s} {solver:12s} ready in {dt:6.1f} s")


def main(argv=None) -> int:
    from .kernels.registry import cache_info, clear_cache
    from .problems import BUILTIN

    ap = argparse.ArgumentParser(prog="python -m hbvm_core", description=__doc__.splitlines()[0])
    top = ap.add_subparsers(dest="group", required=True)
    kernels = top.add_parser("kernels", help="the compiled-kernel cache")
    sub = kernels.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warm", help="compile the built-in problems' loops into the cache")
    w.add_argument("--solver", nargs="+", default=["fixed-point", "blended"], choices=["fixed-point", "blended"])
    w.add_argument("--problems", nargs="+", default=sorted(BUILTIN), choices=sorted(BUILTIN))
    w.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    sub.add_parser("info", help="where the cache is and what it holds")
    sub.add_parser("clear", help="remove the generated loop modules and their numba cache")
    args = ap.parse_args(argv)
    if args.cmd == "warm":
        warm(args.problems, args.solver, args.jobs)
    elif args.cmd == "info":
        print("\n".join(cache_info()))
    else:
        print(f"cleared {clear_cache()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
