"""The compiled-kernel cache from the command line.

    python -m hbvm_core.kernels warm [--solver fixed-point blended] [--problems NAME ...] [-j N]
    python -m hbvm_core.kernels info
    python -m hbvm_core.kernels clear

warm compiles (or finds in the cache) the loop of every built-in problem, one
process per problem and solver, N at a time (default: all cores), so that later
runs -- Snakemake jobs, Dask workers -- only load them. info lists the cache;
clear removes the generated modules and numba's cache of them.
"""

from __future__ import annotations

import argparse
import os
import shutil
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
    from ..problems import BUILTIN
    from .registry import cache_dir

    ap = argparse.ArgumentParser(prog="python -m hbvm_core.kernels", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warm", help="compile the built-in problems' loops into the cache")
    w.add_argument("--solver", nargs="+", default=["fixed-point", "blended"], choices=["fixed-point", "blended"])
    w.add_argument("--problems", nargs="+", default=sorted(BUILTIN), choices=sorted(BUILTIN))
    w.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    sub.add_parser("info", help="where the cache is and what it holds")
    sub.add_parser("clear", help="remove the generated loop modules and their numba cache")
    args = ap.parse_args(argv)
    folder = cache_dir()
    if args.cmd == "warm":
        warm(args.problems, args.solver, args.jobs)
    elif args.cmd == "info":
        mods = sorted(folder.glob("hbvm_kernel_*.py"))
        print(f"{folder}: {len(mods)} generated loop modules")
        for mod in mods:
            keys = ("grad_U_original = ", "G_original = ", "M_SIZE = ", "NU_SIZE = ", "HAS_M = ", "SOLVER = ")
            bound = [line for line in mod.read_text().splitlines()[-12:] if line.startswith(keys)]
            print(f"  {mod.name}: {', '.join(bound)}")
    else:
        for mod in folder.glob("hbvm_kernel_*.py"):
            mod.unlink()
        shutil.rmtree(folder / "__pycache__", ignore_errors=True)
        print(f"cleared {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
