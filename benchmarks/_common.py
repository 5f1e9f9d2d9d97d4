"""Shared helpers of the benchmarks: the machine, a sink that keeps nothing, timing."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class NullSink:
    """Receives the chunks and drops them: times the step and the loop, not the storage."""

    def points(self, start, t, q, p) -> None:
        pass

    def steps(self, start, t, lam, iterations) -> None:
        pass


def machine() -> dict:
    """What the numbers were measured on (and how busy it was)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    import numba
    import numpy

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "load_average_1min": round(load[0], 2),
    }


def project_bytecode(cached: bool) -> None:
    """The bytecode cache of the project's own modules (``__pycache__``, ignored by git): written (``cached``),
    as any Python that may write it has after its first import, or removed. Where ``PYTHONDONTWRITEBYTECODE`` is
    set (this lab's machines) a missing cache is never written: every process compiles the project's modules from
    source again (``source_to_code``: 0.27 s of a 10^5-run sweep's solve job under py-spy), which a user's machine
    pays once (pip compiled the installed packages)."""
    import compileall
    import shutil

    for package in ("hbvm_core", "hbvm_workflow"):
        if cached:
            compileall.compile_dir(str(REPO / package), quiet=1)
        else:
            for folder in (REPO / package).rglob("__pycache__"):
                shutil.rmtree(folder)


def timed(fn, repeats: int, clock=time.thread_time) -> tuple[list[float], list[float]]:
    """(wall seconds, ``clock`` CPU seconds) of each of ``repeats`` calls of fn(): this thread's CPU by default,
    ``time.process_time`` for every thread of the process."""
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), clock()
        fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(clock() - c0)
    return walls, cpus


def best_of(fn, repeats: int, clock=time.thread_time) -> tuple[float, float]:
    """(min wall seconds, min CPU seconds by ``clock``) of ``repeats`` calls of fn() (``timed``)."""
    walls, cpus = timed(fn, repeats, clock)
    return min(walls), min(cpus)


def timed_snakemake(work, *args: str, cores: int = 2, env: dict | None = None) -> float:
    """Wall seconds of ``snakemake --cores <cores> <args> --quiet all`` on this repository's Snakefile in
    ``work``; RuntimeError with the end of stderr if it fails."""
    cmd = [
        sys.executable, "-m", "snakemake", "--cores", str(cores), "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(work), *args, "--quiet", "all",
    ]  # fmt: skip
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"snakemake failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return wall
