"""What a worker runs: one run of a study, from its Job to a published store.

It owns the run: builds the problem and the method from the job, integrates into
a ``storage.ZarrSink`` (bounded memory, written under a temporary path), and
publishes the store atomically -- or writes a failure marker when the nonlinear
iteration diverges. Storage only writes and reads stores.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import platform
import shutil
import time
from pathlib import Path

from hbvm_core.errors import ConfigError, ConvergenceError, HBVMError, NonFiniteError
from hbvm_core.integrate import integrate, number_of_steps

from .cluster import default_start_method
from .pages import small_pages
from .runs import Job
from .storage import (
    FAILED,
    FORMAT,
    Expected,
    ZarrSink,
    default_tmp_dir,
    new_temporary,
    publish,
    remove_path,
    store_state,
    versions,
    write_json_atomic,
)


class WorkerError(HBVMError, RuntimeError):
    """A worker cannot run a planned job as planned: it does not see what the solve step shares with it (the
    results folder, the problem module), or it builds another problem than the one planned."""


def solve_batch(jobs: list[dict]) -> list[dict]:
    """``solve_job`` for each job of a batch (one Dask task for many small runs), the problems built once.

    A run that raises does not stop the others: its summary is {"id", "raised": "<type>: <message>"}.
    A run whose store is already complete for its hash (a batch retried after a lost worker) is not
    computed again.
    """

    small_pages()  # a worker that Snakemake's process did not start (a SLURM worker job): before the arrays

    problems: dict[str, tuple] = {}
    out = []
    for entry in jobs:
        job = Job(**entry)
        try:
            published = os.path.exists(job.store)  # a batch retried after a lost worker
            status, a = store_state(job.store, Expected.of_job(job)) if published else ("missing", None)
            if status == "complete":
                out.append({"id": job.id, "status": "ok", "steps": a["steps"], "wall_s": a.get("wall_s"),
                            "mean_iterations": a.get("mean_iterations"), "error": None})  # fmt: skip
                continue
            out.append(solve_job(job, problems))
        except Exception as exc:  # noqa: BLE001 - reported per run by the solve step
            out.append({"id": job.id, "raised": f"{type(exc).__name__}: {exc}"})
    return out


def _problem(job: Job, cache: dict | None):
    """The job's problem, built once per (problem entry, params) in ``cache``."""
    from hbvm_core.checks import derivative_checks
    from hbvm_core.problems import get_problem

    key = json.dumps([job.problem, job.params], sort_keys=True, default=repr)
    if cache is None or key not in cache:
        with derivative_checks(False):  # checked when the study was expanded; the identity is the same
            problem = get_problem(job.problem, **job.params)
        if cache is None:
            return problem
        cache[key] = problem
    return cache[key]


def check_shared(job: Job) -> None:
    """WorkerError (one line naming this host and the path) when this host cannot see what it shares with the
    host of the solve step: the study's results folder (``job.study_dir``: it exists there, the study's lock is
    in it). Checked before anything is written: a worker that does not share the file system would otherwise
    write its stores where nobody reads them (docs/clusters.md). The kernel cache is the worker's own (shared
    or not, a loop compiles the same): a folder HBVM_KERNEL_CACHE names that does not exist yet is created
    (``kernels.modules.cache_dir``)."""
    from hbvm_core.kernels.modules import cache_dir

    study = job.study_dir
    if study and not os.path.isdir(study):
        raise WorkerError(
            f"run {job.id}: host {platform.node()} cannot see the results folder {study} "
            "(it must be shared with the host of the solve step: docs/clusters.md)"
        )
    cache_dir()


def check_problem(job: Job, problem) -> dict | None:
    """The job's reference probe (``hbvm_core.fingerprint.problem_probe``), after checking that ``problem`` (built
    here) is the one planned: the same structure, and values that agree to ``PROBE_RTOL`` x scale (round-off of
    another host is not a reason to refuse). None for a job planned without them. WorkerError otherwise."""
    from hbvm_core.fingerprint import PROBE_RTOL, problem_mismatch

    if not job.problem_structure:
        return None
    probe = json.loads(job.problem_probe) if job.problem_probe else None
    why = problem_mismatch(problem, job.problem_structure, probe)
    if why is not None:
        raise WorkerError(
            f"run {job.id}: problem {job.problem!r} on host {platform.node()} is not the one planned when the "
            f"workflow started ({why}; round-off up to {PROBE_RTOL:g} x scale is accepted); run again"
        )
    return probe


def _checked(job: Job, problem, cache: dict | None) -> dict | None:
    """``check_problem``, once per built problem and planned identity in ``cache`` (the runs of a batch share
    them: the check computes the problem's structure and probe values)."""
    if cache is None:
        return check_problem(job, problem)
    key = ("checked", id(problem), job.problem_structure, job.problem_probe)  # the problem lives in the cache
    if key not in cache:
        cache[key] = check_problem(job, problem)
    return cache[key]


def solve_job(job: Job | dict, problems: dict | None = None) -> dict:
    """Integrate one job into its Zarr store (atomically); runs on a Dask worker.

    ``problems``: a cache of built problems shared by the runs of a batch (``solve_batch``).
    Returns a summary dict: id, hash, store, status ("ok" | "failed"), steps,
    mean_iterations, wall_s, and for a failure the error (step, t, increment).
    """
    from hbvm_core.methods import load_method_modules, method_from_entry

    job = job if isinstance(job, Job) else Job(**job)
    check_shared(job)
    if job.method_module:  # a method registered outside hbvm_core (config: method_modules)
        load_method_modules([job.method_module])
    try:
        problem = _problem(job, problems)
    except ConfigError as exc:
        if not job.module_file:
            raise
        raise WorkerError(
            f"run {job.id}: host {platform.node()} cannot import the problem module {job.module_file} "
            f"(it must be shared with, or uploaded by, the host of the solve step: docs/clusters.md): {exc}"
        ) from None
    probe = _checked(job, problem, problems)
    method = method_from_entry(job.method)
    identity = {}
    if probe is not None:  # the planned identity, checked above: the record a later plan snaps to
        identity = {
            "problem_fingerprint": job.problem_fingerprint,
            "problem_structure": job.problem_structure,
            "problem_probe": probe,
        }
    attrs = {
        "study": job.study,
        "job_id": job.id,
        "job_hash": job.hash,
        **identity,
        "numerics_fingerprint": job.numerics_fingerprint,
        "label": job.label,
        "method_name": job.name,
        "problem_entry": job.problem,
        "problem_params": job.params,
        "method_entry": job.method,
        "worker": _worker_address(),
    }
    summary = run_to_store(
        job.store,
        problem,
        method,
        job.h,
        job.t_end,
        attrs=attrs,
        save_every=job.save_every,
        chunk=job.chunk,
        compensated=job.compensated,
        backend=job.backend,
    )
    return {"id": job.id, "hash": job.hash, "store": job.store, "worker": attrs["worker"], **summary}


def compile_processes(threads: int, cold: int) -> int:
    """Processes for compiling ``cold`` loops a solve job of ``threads`` threads found missing from the kernel cache:
    up to ``HBVM_COMPILE_PROCESSES`` (the Snakefile sets it to the run's --cores) and the CPUs this process may run
    on, at least the job's threads. A first study's loops (10-20 s each) then compile side by side though its
    runs' work alone asks for one thread."""
    try:
        allowed = int(os.environ.get("HBVM_COMPILE_PROCESSES") or threads)
    except ValueError:
        allowed = threads
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(int(threads), min(int(cold), allowed, cpus))


def warm_up(jobs, processes: int = 1, tell=None) -> int:
    """One step of each distinct (problem, method, backend) of ``jobs`` in this process.

    Compiles (or loads from numba's cache) the kernels here, and imports what
    ``solve_job`` needs, before a local cluster forks its workers: they inherit
    them instead of each paying for them. With ``processes`` > 1, the compiled
    loops that are not in the disk cache yet (a first run: some 15 s each) are
    compiled first in that many processes side by side, and only loaded here.
    ``tell(studies, line)``, where given, receives a line per loop compiled or
    loaded (``registry.LoopTime``) for the studies of its jobs.
    Returns how many were run; a step that fails is left to the real run.
    """
    import zarr.api.asynchronous  # noqa: F401  (what the workers' solve_job imports: they inherit it too)

    distinct, studies = {}, {}
    for job in jobs:
        key = json.dumps([job.problem, job.params, job.method, job.backend, job.compensated], sort_keys=True)
        distinct.setdefault(key, job)
        studies.setdefault(key, set()).add(job.study)
    cold = _uncached_loops(distinct.values()) if compile_processes(processes, len(distinct)) > 1 else []
    processes = compile_processes(processes, len(cold))
    if len(cold) > 1 and processes > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context(default_start_method())
        with ProcessPoolExecutor(max_workers=min(processes, len(cold)), mp_context=ctx) as pool:
            times = list(pool.map(_one_step, [job.as_dict() for job in cold]))
        for job, loops in zip(cold, times):
            _tell_loops(tell, {job.study}, job, loops, " (in a side process)")
    for key, job in distinct.items():
        _tell_loops(tell, studies[key], job, _one_step(job))
    return len(distinct)


def _tell_loops(tell, studies: set, job: Job, loops: list, where: str = "") -> None:
    """A line per loop of ``loops`` (``registry.LoopTime``): the job's problem and method, the loop, its seconds."""
    from hbvm_core.problems import problem_name

    for loop in loops if tell is not None else ():
        tell(studies, f"{problem_name(job.problem)}, {job.label}: {loop.phrase()}{where}")


def _one_step(job: Job | dict) -> list:
    """One step of the job's problem and method (compiles or loads its loop); a failure is left to the real run.
    Returns the loops it compiled or loaded (``registry.LoopTime``)."""
    from hbvm_core.checks import derivative_checks
    from hbvm_core.errors import HBVMError
    from hbvm_core.integrate import integrate
    from hbvm_core.kernels import registry
    from hbvm_core.methods import method_from_entry
    from hbvm_core.problems import get_problem

    job = job if isinstance(job, Job) else Job(**job)
    since = len(registry.LOOP_TIMES)
    try:
        with derivative_checks(False):  # checked when the study was expanded
            problem = get_problem(job.problem, **job.params)
        integrate(
            problem, method_from_entry(job.method), job.h, job.h, compensated=job.compensated, backend=job.backend
        )
    except (HBVMError, FloatingPointError):
        pass
    return registry.loop_times(since)


def _uncached_loops(jobs) -> list[Job]:
    """One job for each distinct compiled loop of ``jobs`` that the kernel cache does not hold yet
    (``hbvm_core.kernels.uncached_loop``); a loop that cannot be told counts as cached (compiled here)."""
    from hbvm_core.checks import derivative_checks
    from hbvm_core.errors import HBVMError
    from hbvm_core.kernels import uncached_loop
    from hbvm_core.methods import method_from_entry
    from hbvm_core.problems import get_problem

    cold: dict[str, Job] = {}
    for job in jobs:
        if job.backend == "numpy":
            continue
        try:
            with derivative_checks(False):  # checked when the study was expanded
                name = uncached_loop(method_from_entry(job.method), get_problem(job.problem, **job.params))
        except (HBVMError, AttributeError, TypeError):
            continue
        if name is not None:
            cold.setdefault(name, job)
    return list(cold.values())


@functools.cache
def cpu_model() -> str:
    """The CPU model of this host (/proc/cpuinfo "model name"; else what ``platform`` says), for the stores' attrs."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip().lower() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _worker_address() -> str | None:
    """The Dask worker running this job (recorded in the store), None outside a worker."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return None


def run_to_store(
    path: str,
    problem,
    method,
    h: float,
    t_end: float,
    *,
    attrs: dict | None = None,
    save_every: int = 1,
    chunk: int = 65536,
    compensated: bool = True,
    backend: str = "auto",
    tmp_dir: str | None = None,
) -> dict:
    """Integrate into a new store at ``path`` (atomically), or write a failure marker if the run diverges.

    Both are written in ``tmp_dir`` (default: the study's ``.tmp`` folder, ``storage.default_tmp_dir``)
    and renamed into place. Returns {"status": "ok" | "failed", "steps", "mean_iterations", "max_iterations", "wall_s",
    "backend", "error"}.
    """
    from hbvm_core.fingerprint import problem_fingerprint, problem_probe, problem_structure

    N = number_of_steps(h, t_end)
    tmp_dir = tmp_dir or default_tmp_dir(path)
    tmp = new_temporary(tmp_dir, path)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    attrs = attrs or {}
    identity = {  # the problem's identity: the planned one the caller checked (``check_problem``), else its own
        key: attrs[key] if key in attrs else of(problem)
        for key, of in (
            ("problem_fingerprint", problem_fingerprint),
            ("problem_structure", problem_structure),
            ("problem_probe", problem_probe),
        )
    }
    base = {
        **identity,
        **attrs,
        "format": FORMAT,
        "problem": problem.name,
        "m": problem.m,
        "nu": problem.nu,
        "period": problem.period,
        "params": problem.params,
        "method": method.name,
        "method_attrs": method.attrs(),
        "h": float(h),
        "t_end": float(t_end),
        "steps": N,
        "save_every": int(save_every),
        "chunk": int(chunk),
        "compensated": bool(compensated),
        "backend_requested": backend,
        "versions": versions(),
        "host": platform.node(),
        "cpu": cpu_model(),
    }
    t0 = time.perf_counter()
    sink = None
    try:
        sink = ZarrSink(tmp, problem, N, save_every=save_every, chunk=chunk)
        traj = integrate(
            problem,
            method,
            h,
            t_end,
            compensated=compensated,
            save_every=save_every,
            chunk=chunk,
            sink=sink,
            backend=backend,
        )
        a = traj.attrs
        run = {
            "wall_s": float(a["wall_s"]),
            "mean_iterations": float(a["mean_iterations"]),
            "max_iterations": int(a["max_iterations"]),
            "backend": a.get("backend", "numpy"),
        }
        # the numpy path's dense or sparse solves, and the sparse path's sweep (compiled or numpy)
        algebra = {"linear_algebra": a.get("linear_algebra", "dense"), "sparse_sweep": a.get("sparse_sweep", "none")}
        sink.finish({**base, **run, **algebra, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        publish(tmp, path)
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + FAILED)
        return {"status": "ok", "steps": N, **run, "error": None}
    except (ConvergenceError, NonFiniteError, FloatingPointError) as exc:
        _discard(sink, tmp)
        wall = time.perf_counter() - t0
        error = exc.as_dict() if isinstance(exc, ConvergenceError) else {"reason": str(exc)}
        error["message"] = str(exc)
        error["type"] = type(exc).__name__
        payload = {**base, "complete": False, "failed": True, "error": error, "wall_s": wall}
        write_json_atomic(path + FAILED, payload, tmp_dir=tmp_dir)
        return {"status": "failed", "steps": N, "wall_s": wall, "mean_iterations": None, "error": error}
    except OSError as exc:
        _discard(sink, tmp)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(path, attrs, tmp_dir) from None
        raise
    except BaseException:
        _discard(sink, tmp)
        raise


class DiskFull(HBVMError):
    """A run's store did not fit on its disk (ENOSPC, or a quota): its temporary is removed, nothing published."""

    def __init__(self, path: str, attrs: dict | None = None, folder: str | None = None):
        run = (attrs or {}).get("job_id") or path
        folder = folder or os.path.dirname(os.path.abspath(path))
        try:
            free = f"{shutil.disk_usage(folder).free / 1e6:.3g} MB free"
        except OSError:
            free = "free space unknown"
        super().__init__(
            f"run {run}: no space left on the device while writing {path} ({free} in {folder}); nothing of it "
            "was kept: free space, then run the same command again"
        )

    def __reduce__(self):  # raised on a Dask worker: reaches the solve step as its message
        return HBVMError, (str(self),)


def _discard(sink, tmp: str) -> None:
    """Close an unfinished store and remove its temporary."""
    if sink is not None:
        with contextlib.suppress(Exception):
            sink.abort()
    remove_path(tmp)
