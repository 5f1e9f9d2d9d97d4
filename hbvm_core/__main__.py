"""The compiled-kernel cache from the command line.

    python -m hbvm_core kernels warm [--loops hbvm polynomial rattle] [--solver fixed-point blended]
                                     [--problems NAME ...] [-j N]
    python -m hbvm_core kernels info
    python -m hbvm_core kernels clear

warm compiles (or finds in the cache) the loops of every built-in problem -- the
constant-multiplier HBVM with each solver, the polynomial-multiplier HBVM and
RATTLE, where the problem has one -- one process per problem and loop, N at a
time (default: all cores), so that later runs -- Snakemake jobs, Dask workers --
only load them. info lists the cache; clear removes the generated modules and
numba's cache of them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

#: the solvers of the hbvm loops (a warm loop of that name runs only if ``--solver`` names it)
SOLVERS = ("fixed-point", "blended")


def compiled_loops() -> dict:
    """The loops warm can compile: each registered method's loop description (``LOOP``) by its template
    (hbvm, polynomial, rattle), in the registry's order."""
    from .methods import registered

    return {cls.LOOP.template: cls.LOOP for cls in registered() if getattr(cls, "LOOP", None) is not None}


def _warm_entry(loop: str) -> tuple[str, dict]:
    """(label, study entry) of a warm loop name ("fixed-point", "blended", "polynomial", "rattle")."""
    for description in compiled_loops().values():
        if loop in description.warm:
            return description.warm[loop]
    from .errors import ConfigError

    raise ConfigError(f"loop {loop!r}: no compiled method's loop warms it")


def loop_method(loop: str):
    """A method whose compiled loop is ``loop`` (a name of a description's ``warm``).

    One loop serves every (k, s) (unless HBVM_SPECIALISE_KS is set), so any k and s will do."""
    from .methods import method_from_entry

    return method_from_entry(dict(_warm_entry(loop)[1]))


def loop_label(loop: str) -> str:
    """The loop as warm reports it."""
    return _warm_entry(loop)[0]


def warm_tasks(problems: list[str], solvers: list[str], loops: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """(problem, loop) pairs to warm for the described loops named in ``loops`` (hbvm, polynomial, rattle): the
    names of their ``warm``, those of a solver only if ``solvers`` has it."""
    names = [
        name
        for template, description in compiled_loops().items()
        if template in loops
        for name in description.warm
        if name not in SOLVERS or name in solvers
    ]
    return [(p, loop) for p in problems for loop in names]


def _warm_one(args: tuple[str, str]) -> tuple[str, str, float | None]:
    """Compile (or load) one loop by a one-step run; the seconds taken, or None where there is no compiled loop."""
    name, loop = args
    import hbvm_core as hc
    from hbvm_core.integrate import compiled_runner

    t0 = time.perf_counter()
    pb = hc.get_problem(name)
    method = loop_method(loop)
    if compiled_runner(pb, method) is None:
        return name, loop, None
    h = 0.01 if pb.period is None else pb.period / 100
    hc.integrate(pb, method, h, h, backend="numba")
    return name, loop, time.perf_counter() - t0


def warm(problems: list[str], solvers: list[str], jobs: int, loops: tuple[str, ...] | list[str] | None = None) -> None:
    """Warm each (problem, loop) of ``warm_tasks`` (every described loop by default), ``jobs`` processes at a time,
    one line of output per loop."""
    tasks = warm_tasks(problems, solvers, tuple(compiled_loops()) if loops is None else loops)
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(tasks)))) as pool:
        for name, loop, dt in pool.map(_warm_one, tasks):
            done = "no compiled loop (runs on numpy)" if dt is None else f"ready in {dt:6.1f} s"
            print(f"{name:22s} {loop_label(loop):18s} {done}")


def main(argv=None) -> int:
    from .kernels.registry import cache_info, clear_cache
    from .problems import BUILTIN

    ap = argparse.ArgumentParser(prog="python -m hbvm_core", description=__doc__.splitlines()[0])
    top = ap.add_subparsers(dest="group", required=True)
    kernels = top.add_parser("kernels", help="the compiled-kernel cache")
    sub = kernels.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warm", help="compile the built-in problems' loops into the cache")
    loops = tuple(compiled_loops())
    w.add_argument("--loops", nargs="+", default=list(loops), choices=loops)
    w.add_argument("--solver", nargs="+", default=list(SOLVERS), choices=SOLVERS, help="the hbvm loops' solvers")
    w.add_argument("--problems", nargs="+", default=sorted(BUILTIN), choices=sorted(BUILTIN))
    w.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    sub.add_parser("info", help="where the cache is and what it holds")
    sub.add_parser("clear", help="remove the generated loop modules and their numba cache")
    args = ap.parse_args(argv)
    if args.cmd == "warm":
        warm(args.problems, args.solver, args.jobs, args.loops)
    elif args.cmd == "info":
        print("\n".join(cache_info()))
    else:
        print(f"cleared {clear_cache()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
