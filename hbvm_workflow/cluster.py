"""Dask glue: a ``distributed.Client`` for the solve step, from the config's ``dask:`` section.

- default (``cluster: local``): a LocalCluster of ``n_workers`` (default: the
  rule's threads) single-threaded worker processes, every socket on 127.0.0.1,
  no dashboard, TLS with temporary credentials (a client without them is
  refused); worker processes are forked (``start_method: fork``, the default
  on Linux: a worker is up in well under a second, against seconds for a spawned
  interpreter that re-imports everything);
- ``address: tcp://host:port`` or ``scheduler_file: path``: an existing scheduler
  (``dask scheduler`` + ``dask worker`` started by the user), reached with the
  ``security`` settings given (TLS files), within ``timeout`` s (default 10; a
  refused connection fails at once); plain-text ``tcp://`` is refused for a
  scheduler on another host unless ``insecure: true`` (``require_authenticated``);
- ``cluster: slurm``: a dask-jobqueue SLURMCluster: worker jobs of ``cores``
  single-threaded worker processes each (``memory``, ``walltime``, ``queue``,
  ``account``, ``job_extra_directives``, ``job_script_prologue``), as many as
  the pending runs need up to ``jobs`` (default 8), ``min_workers`` of them (default 1) joined within
  ``worker_timeout`` (the jobs not started named in one line), cancelled on exit, TLS with
  temporary credentials (written for the worker jobs next to their logs). Every
  address is on ``scheduler_host`` (default 127.0.0.1: the workers must run on
  this node, as on a single-node test cluster); for workers on other nodes give
  ``interface`` (e.g. ib0) instead.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from hbvm_core.errors import ConfigError, HBVMError

from .layout import SLURM_LOGS
from .runs import WORK_PER_WORKER_S, workers_for
from .shards import shard_size

#: one BLAS/OpenMP thread per worker process: the workers are the parallelism
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
START_METHODS = ("fork", "spawn", "forkserver")
#: config dask keys passed to dask-jobqueue's SLURMCluster as they are
SLURM_KEYS = ("cores", "processes", "memory", "walltime", "queue", "account", "job_extra_directives", "log_directory")
SLURM_DEFAULTS = {"cores": 1, "memory": "1GB", "log_directory": SLURM_LOGS}
#: at most this many worker jobs unless dask.jobs says otherwise
SLURM_MAX_JOBS = 8
LOOPBACK = "127.0.0.1"
#: seconds to reach an existing scheduler (config dask.timeout)
CONNECT_TIMEOUT = 10.0
#: the Dask workers of a SLURMCluster that must have joined within dask.worker_timeout (config dask.min_workers)
MIN_WORKERS = 1


def describe(dask_cfg: dict | None, threads: int) -> str:
    """A short description of where the jobs will run (for logs)."""
    cfg = dask_cfg or {}
    if cfg.get("address"):
        return f"scheduler {cfg['address']}"
    if cfg.get("scheduler_file"):
        return f"scheduler from {cfg['scheduler_file']}"
    if cfg.get("cluster", "local") == "slurm":
        where = cfg.get("interface") or cfg.get("scheduler_host") or LOOPBACK
        cores = cfg.get("cores", SLURM_DEFAULTS["cores"])
        return f"SLURMCluster (up to {cfg.get('jobs', SLURM_MAX_JOBS)} worker jobs of {cores} cores, on {where})"
    return f"LocalCluster ({cfg.get('n_workers', threads)} worker processes on 127.0.0.1)"


@contextlib.contextmanager
def dask_client(
    dask_cfg: dict | None, threads: int = 1, env: dict | None = None, tasks: int | None = None, tell=None
) -> Iterator:
    """A connected ``distributed.Client`` (closed, with any cluster it started, on exit).

    ``threads``: the Snakemake rule's threads, the default number of local workers.
    ``env``: extra environment variables for the workers it starts (e.g. PYTHONPATH).
    ``tasks``: the number of runs to compute; a SLURMCluster starts as many worker jobs as they need.
    ``tell``: receives the one line naming worker jobs of a SLURMCluster not started by ``worker_timeout``.
    """
    from distributed import Client

    from .quiet_close import QuietClose

    cfg = dict(dask_cfg or {})
    timeout = float(cfg.get("timeout", CONNECT_TIMEOUT))
    if cfg.get("address") and cfg.get("scheduler_file"):
        raise ConfigError("dask: give address or scheduler_file, not both")
    if cfg.get("address") or cfg.get("scheduler_file"):
        client = _connect(cfg, timeout)
        try:
            yield client
        finally:
            client.close()
        return
    cluster_type = cfg.get("cluster", "local")
    if cluster_type not in ("local", "slurm"):
        raise ConfigError(f"dask.cluster = {cluster_type!r}: expected local or slurm")
    method = cfg.get("start_method") or default_start_method()
    if method not in START_METHODS:
        raise ConfigError(f"dask.start_method = {method!r}: expected one of {', '.join(START_METHODS)}")
    import dask  # here: the parse imports this module for rule_resources, and needs no Dask

    security = temporary_security()
    with dask.config.set({"distributed.worker.multiprocessing-method": method}):
        if cluster_type == "local":
            cluster = _local_cluster(cfg.get("n_workers") or max(1, int(threads)), env, security)
        else:
            cluster = _slurm_cluster(cfg, env, tasks if tasks is not None else threads, security)
        try:
            client = Client(cluster, timeout=timeout, security=security)
            timer = None
            try:
                client.register_plugin(QuietClose())
                timer = _wait_for_workers(client, cluster, cfg, tell) if cluster_type == "slurm" else None
                yield client
            finally:
                if timer is not None:
                    timer.cancel()
                client.close()
        finally:
            cluster.close()


def is_local(dask_cfg: dict | None) -> bool:
    """Whether the solve starts a LocalCluster (no scheduler address or file, ``cluster: local``)."""
    cfg = dask_cfg or {}
    return not (cfg.get("address") or cfg.get("scheduler_file")) and cfg.get("cluster", "local") == "local"


def spread(dask_cfg: dict | None, threads: int, n_tasks: int) -> tuple[int, int]:
    """(worker processes, numba threads per shard task) of a solve of ``n_tasks`` Dask tasks given the rule's
    ``threads``: on a local cluster, ``dask.n_workers`` or one worker per task up to the threads, and the threads
    shared among the workers, so that a study of fewer shards than cores still uses every core (the ensemble's
    ``prange`` over a shard's runs); elsewhere (a scheduler, SLURM) one thread per worker process, as the
    workers' environment (``THREAD_ENV``) sets."""
    cfg = dask_cfg or {}
    threads = max(1, int(threads))
    workers = int(cfg.get("n_workers") or min(threads, max(1, int(n_tasks))))
    return workers, (max(1, threads // workers) if is_local(cfg) else 1)


def forks_local_workers(dask_cfg: dict | None) -> bool:
    """Whether the workers will be forked from this process (a local cluster with start_method fork)."""
    cfg = dask_cfg or {}
    return is_local(cfg) and (cfg.get("start_method") or default_start_method()) == "fork"


def default_start_method() -> str:
    """fork where the platform has it (Linux), else spawn."""
    import multiprocessing

    return "fork" if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods() else "spawn"


def temporary_security():
    """TLS with credentials made for this cluster only: a client without them cannot connect."""
    from distributed.security import Security

    return Security.temporary()


def user_security(cfg: dict):
    """The ``dask.security`` settings for an existing scheduler (None: Dask's own config decides)."""
    from distributed.security import Security

    sec = cfg.get("security")
    if not sec:
        return None
    for key in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
        if sec.get(key) and not os.path.isfile(sec[key]):
            raise ConfigError(f"dask.security.{key} = {sec[key]!r}: no such file")
    return Security(**sec)


def _connect(cfg: dict, timeout: float):
    """A Client of an existing scheduler; HBVMError naming it if it cannot be reached within ``timeout`` s."""
    from distributed import Client

    where = (
        f"dask.address = {cfg['address']!r}"
        if cfg.get("address")
        else f"dask.scheduler_file = {cfg['scheduler_file']!r}"
    )
    if cfg.get("scheduler_file") and not os.path.isfile(cfg["scheduler_file"]):
        raise HBVMError(f"{where}: no such file (is the scheduler running?)")
    kw = {"address": cfg["address"]} if cfg.get("address") else {"scheduler_file": cfg["scheduler_file"]}
    require_authenticated(cfg, where)
    security = user_security(cfg)
    if cfg.get("address"):
        _reachable(cfg["address"], timeout, where)
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": f"{timeout}s"}):
        try:
            return Client(timeout=timeout, security=security, **kw)
        except (OSError, TimeoutError, ValueError) as exc:
            raise HBVMError(
                f"{where}: cannot reach the Dask scheduler within {timeout:g} s ({type(exc).__name__}: {exc}); "
                "start it, fix the address, or raise dask.timeout"
            ) from exc


def require_authenticated(cfg: dict, where: str) -> None:
    """ConfigError (one line, before any connection) for a plain-text ``tcp://`` scheduler that is not on this
    host (loopback), unless the config accepts plain text (``dask.insecure: true``). A scheduler file's
    address is read from it (JSON data, key ``address``)."""
    import json
    from urllib.parse import urlsplit

    address = cfg.get("address")
    if not address and cfg.get("scheduler_file"):
        try:
            with open(cfg["scheduler_file"]) as fh:
                address = json.load(fh).get("address")
        except (OSError, ValueError, AttributeError):
            return  # the connection names what is wrong with the file
    if not isinstance(address, str) or cfg.get("insecure") is True:
        return
    url = urlsplit(address if "://" in address else f"tcp://{address}")
    if url.scheme != "tcp" or _is_loopback(url.hostname or ""):
        return
    raise ConfigError(
        f"{where}: plain-text TCP to a scheduler on another host ({address}) is refused; use a tls:// address "
        "with dask: {security: {tls_ca_file: ..., tls_client_cert: ..., tls_client_key: ...}} "
        "(docs/clusters.md), or accept plain text with dask: {insecure: true}"
    )


def _reachable(address: str, timeout: float, where: str) -> None:
    """Fail at once (HBVMError naming ``where``) when a tcp/tls address refuses connections: Dask
    itself retries a refused connection until its timeout."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(address)
    if url.scheme not in ("tcp", "tls") or not url.hostname or not url.port:
        return
    try:
        socket.create_connection((url.hostname, url.port), timeout=timeout).close()
    except OSError as exc:
        raise HBVMError(
            f"{where}: cannot reach the Dask scheduler ({exc.strerror or exc}); start it or fix the address"
        ) from exc


def _local_cluster(n_workers: int, env: dict | None, security=None):
    from distributed import LocalCluster

    if os.getcwd() not in sys.path:  # forked workers inherit sys.path, spawned ones read PYTHONPATH
        sys.path.insert(0, os.getcwd())
    return LocalCluster(
        n_workers=int(n_workers),
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        protocol="tls://" if security is not None else None,
        security=security,
        dashboard_address=None,
        worker_dashboard_address=None,
        # no dashboard; the scheduler's remaining HTTP routes (health) on a free loopback port
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
        silence_logs=40,  # logging.ERROR
        env={**THREAD_ENV, **_pythonpath_env(), **(env or {})},
    )


def slurm_options(cfg: dict, env: dict | None = None) -> dict:
    """Keyword arguments of dask-jobqueue's SLURMCluster from the config's ``dask:`` section.

    Loopback unless ``interface`` or a non-loopback ``scheduler_host`` is given:
    the scheduler, its dashboard, the workers, nannies and their dashboards all
    bind 127.0.0.1 (ports chosen by the OS). The worker jobs run this
    interpreter (``python``, default ``sys.executable``, so they import the same
    hbvm_core) with one BLAS thread and this PYTHONPATH, after any lines of
    ``job_script_prologue`` (module load ..., source venv/bin/activate).
    """
    if cfg.get("interface") and cfg.get("scheduler_host"):
        raise ConfigError("dask: give interface or scheduler_host, not both")
    kw = {**SLURM_DEFAULTS, **{k: cfg[k] for k in SLURM_KEYS if k in cfg}}
    kw.setdefault("processes", kw["cores"])  # single-threaded workers: one per core
    if kw["cores"] % kw["processes"]:
        raise ConfigError(f"dask.processes = {kw['processes']!r}: must divide dask.cores = {kw['cores']!r}")
    kw["job_mem"] = slurm_mem(kw["memory"])  # whole MiB, never above dask.memory (dask-jobqueue rounds up)
    kw["python"] = cfg.get("python") or sys.executable
    if cfg.get("interface"):
        kw["interface"] = cfg["interface"]
        kw["scheduler_options"] = {"dashboard_address": ":0"}
    else:
        host = cfg.get("scheduler_host") or LOOPBACK
        kw["scheduler_options"] = {"host": host, "dashboard_address": f"{host}:0"}
        if _is_loopback(host):
            # workers on this node only; without --dashboard-address their dashboards bind 0.0.0.0
            kw["worker_extra_args"] = ["--host", host, "--dashboard-address", f"{host}:0"]
    exports = {**THREAD_ENV, **_pythonpath_env(), **(env or {})}
    kw["job_script_prologue"] = [
        *cfg.get("job_script_prologue", []),
        *(f"export {k}={shlex.quote(str(v))}" for k, v in exports.items()),
    ]
    return kw


def slurm_jobs(cfg: dict, tasks: int) -> int:
    """Worker jobs for ``tasks`` pending runs: enough for one worker process per run, at most ``jobs``."""
    per_job = int(cfg.get("processes") or cfg.get("cores") or SLURM_DEFAULTS["cores"])
    return max(1, min(int(cfg.get("jobs", SLURM_MAX_JOBS)), math.ceil(max(1, int(tasks)) / per_job)))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _slurm_cluster(cfg: dict, env: dict | None, tasks: int, security=None):
    """A dask-jobqueue SLURMCluster scaled to the pending runs (``slurm_options``, ``slurm_jobs``)."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ConfigError(f"dask.cluster = 'slurm' needs dask-jobqueue ({exc})") from None
    kw = slurm_options(cfg, env)
    os.makedirs(kw["log_directory"], exist_ok=True)
    cluster = SLURMCluster(**kw, **slurm_security(kw, security))
    try:
        cluster.scale(jobs=slurm_jobs(cfg, tasks))
    except BaseException:
        cluster.close()
        raise
    return cluster


def slurm_security(kw: dict, security) -> dict:
    """SLURMCluster keywords for TLS with ``security``: dask-jobqueue writes the workers' temporary
    credentials into files in ``shared_temp_directory`` (the worker jobs' log folder, absolute), read by
    the worker jobs' ``--tls-*`` options."""
    if security is None:
        return {}
    folder = os.path.abspath(kw["log_directory"])
    os.makedirs(folder, exist_ok=True)
    return {"security": security, "protocol": "tls://", "shared_temp_directory": folder}


def squeue_states(ids: list[str]) -> dict[str, str]:
    """{job id: "STATE REASON"} of SLURM jobs as ``squeue -t all`` gives them: pending and running, and ended
    ones while slurmctld keeps them (``MinJobAge``), e.g. "COMPLETED" or "FAILED NonZeroExitCode" (a reason of
    "None" left out); a job it no longer lists: none; where squeue cannot be run, {"": what went wrong}."""
    if not ids:
        return {}
    try:
        out = subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T %r"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"": f"squeue: {exc}"}
    states = {}
    for line in out.stdout.splitlines():
        job, _, state = line.strip().partition(" ")
        if job:
            states[job] = state.strip().removesuffix(" None")
    if not states and out.returncode and out.stderr.strip():
        states[""] = f"squeue: {out.stderr.strip().splitlines()[0]}"
    return states


def job_started(name: str, workers: list[str]) -> bool:
    """Whether a worker job (its name in the SLURMCluster) has a worker among the scheduler's ``workers`` (names:
    the job's own, or ``<job>-<i>`` for a job of several worker processes)."""
    return any(w == name or w.startswith(f"{name}-") for w in workers)


def worker_shortfall(
    jobs: dict[str, str], workers: list[str], per_job: int, min_workers: int, states: dict[str, str], timeout: float
) -> tuple[str | None, bool]:
    """(one line naming the worker jobs that have not started, with their squeue state and reason, or None when all
    have; whether the run stops). ``jobs``: name -> SLURM job id; ``workers``: the names of the workers that have
    joined. The run goes on when at least ``min_workers`` have joined (or every worker the jobs would give, when
    that is fewer)."""
    waiting = [name for name in jobs if not job_started(name, workers)]
    if not waiting:
        return None, False
    need = max(1, min(int(min_workers), len(jobs) * int(per_job)))
    joined = len(workers)
    named = "; ".join(f"{jobs[n]} {states.get(jobs[n]) or 'not in squeue'}" for n in waiting)
    if states.get(""):
        named += f"; {states['']}"
    line = (
        f"dask.cluster = 'slurm': {len(waiting)} of {len(jobs)} worker jobs not started within "
        f"dask.worker_timeout = {timeout:g} s ({named}); {joined} Dask worker(s) joined"
    )
    if joined < need:
        return f"{line}, dask.min_workers = {min_workers}: stopping", True
    return f"{line}: going on with them (dask.min_workers = {min_workers})", False


def _wait_for_workers(client, cluster, cfg: dict, tell=None):
    """Wait (``worker_timeout`` s, default 600) until ``min_workers`` (default 1) workers have joined, else stop
    with one line naming the worker jobs that have not started (``worker_shortfall``). Once they have, the run
    goes on; jobs still not started when the timeout has passed are named then, in one line to ``tell``, by a
    timer returned (None: every job started already)."""
    import threading

    timeout = float(cfg.get("worker_timeout", 600))
    min_workers = int(cfg.get("min_workers", MIN_WORKERS))
    per_job = int(cfg.get("processes") or cfg.get("cores") or SLURM_DEFAULTS["cores"])
    t0 = time.monotonic()
    jobs = {str(name): str(getattr(job, "job_id", None) or name) for name, job in cluster.workers.items()}
    logs = f"logs in {cfg.get('log_directory', SLURM_DEFAULTS['log_directory'])}"

    def shortfall() -> tuple[str | None, bool]:
        names = [str(w.get("name")) for w in client.scheduler_info(n_workers=-1)["workers"].values()]
        waiting = [jobs[n] for n in jobs if not job_started(n, names)]
        return worker_shortfall(jobs, names, per_job, min_workers, squeue_states(waiting), timeout)

    try:
        client.wait_for_workers(max(1, min(min_workers, len(jobs) * per_job)), timeout=timeout)
    except TimeoutError:
        line, _ = shortfall()
        raise HBVMError(f"{line}; {logs}") from None
    if shortfall()[0] is None:
        return None

    def check() -> None:
        with contextlib.suppress(Exception):  # the run may be over, the client closed
            line, _ = shortfall()
            if line and tell is not None:
                tell(f"{line}; {logs}")

    timer = threading.Timer(max(0.0, timeout - (time.monotonic() - t0)), check)
    timer.daemon = True
    timer.start()
    return timer


def rule_resources(config: dict, rule: str, **defaults) -> dict:
    """A Snakemake rule's resources: the config's ``resources.<rule>`` (mem_mb, runtime, ...) over ``defaults``.

    A profile's or the command line's ``--set-resources`` still wins over both.
    """
    return {**defaults, **((config.get("resources") or {}).get(rule) or {})}


def _pythonpath_env() -> dict:
    """Workers see the working directory (user problems given as module.path:factory live there)."""
    paths = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def _problem_module(problem_entry: str):
    """(top-level module name, its file or package folder) of a ``module.path:factory`` problem that
    is not installed in site-packages; None for a built-in problem or an installed module."""
    import importlib.util
    import sysconfig

    from hbvm_core.problems import BUILTIN

    if not isinstance(problem_entry, str) or problem_entry in BUILTIN or ":" not in problem_entry:
        return None
    top = problem_entry.partition(":")[0].split(".")[0]
    if os.getcwd() not in sys.path:  # a module next to the config, as expand_study finds it
        sys.path.insert(0, os.getcwd())
    found = importlib.util.find_spec(top)
    if found is None or not found.origin or found.origin in ("built-in", "frozen"):
        return None
    path = os.path.dirname(found.origin) if found.submodule_search_locations else found.origin
    installed = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    if any(os.path.realpath(path).startswith(d + os.sep) for d in installed):
        return None  # installed: the workers' environment has it like ours
    return top, path


def ship_problem_module(client, problem_entry: str) -> str | None:
    """Make the module of a ``module:factory`` problem importable on the client's workers.

    Workers of an existing scheduler (``dask: {address: ...}``) or of a SLURMCluster may run
    in another folder, without the config's folder on their path: the module's file (or its
    top-level package folder) is uploaded to every worker, present and future, by a Dask
    worker plugin (``UploadFile``; ``UploadDirectory`` for a package) that puts it on the
    worker's ``sys.path``. Returns the shipped path (None: a built-in or installed module).
    """
    from distributed.diagnostics.plugin import UploadDirectory, UploadFile

    found = _problem_module(problem_entry)
    if found is None:
        return None
    top, path = found
    if os.path.isdir(path):
        plugin = UploadDirectory(path, update_path=True, restart_workers=False)
    else:
        plugin = UploadFile(path)
        plugin.name = f"hbvm-problem-{top}"  # one plugin per module (UploadFile's own name is shared)
    client.register_plugin(plugin)
    return path


# --------------------------------------------------------------------------- spreading a study over nodes
#: core-seconds of estimated work (hbvm_workflow.runs.work_seconds) above which a summary study spreads (config
#: ``spread``, set by the SLURM profile; dask.spread_after)
SPREAD_AFTER_S = 3600.0
#: a worker job's memory below which the partition's node memory is taken as not configured (RealMemory=1)
MIN_JOB_MEM_MB = 256
#: network interfaces never taken for the scheduler (containers, virtual bridges)
VIRTUAL_IFACES = ("docker", "virbr", "veth", "br-", "cni", "flannel", "cali", "vxlan", "tun", "tap")


@dataclass(frozen=True)
class Nodes:
    """The compute nodes of a SLURM partition as ``sinfo`` reports them: the smallest node's CPUs and memory."""

    partition: str
    count: int
    cpus: int
    mem_mb: int


def spreads(config: dict, work_s: float, n_tasks: int) -> bool:
    """Whether a summary study's solve starts Dask worker jobs on other nodes (``spread_plan``): the config's
    ``spread`` is on (the SLURM profile sets it), the user chose no cluster (``dask.address``,
    ``scheduler_file``, ``cluster: slurm``, ``n_workers``), the study has more than one shard task, and its
    estimated work exceeds ``dask.spread_after`` core-seconds. From the study alone: the parse (the solve job's
    threads) and the solve job decide alike."""
    dask = config.get("dask") or {}
    if not config.get("spread") or not is_local(dask) or dask.get("n_workers"):
        return False
    return int(n_tasks) > 1 and float(work_s) > float(dask.get("spread_after", SPREAD_AFTER_S))


def spread_plan(cfg: dict, n_tasks: int, work_s: float, nodes: Nodes) -> tuple[dict, str]:
    """(the ``dask:`` section of a SLURMCluster for ``n_tasks`` shard tasks of ``work_s`` estimated seconds on
    the partition's ``nodes``, one line saying what it chose and why). What the user fixed (dask.cores,
    processes, memory, jobs, queue) stays. A worker job takes half a node's CPUs and their share of its memory,
    floored to a MiB, so that one fits beside the solve job on its node; worker processes: one per task, per
    WORK_PER_WORKER_S of work, at most every core of the partition (``runs.workers_for``)."""

    cores = int(cfg.get("cores") or max(1, nodes.cpus // 2))
    if cores > nodes.cpus:
        raise ConfigError(f"dask.cores = {cores}: the nodes of partition {nodes.partition} have {nodes.cpus} CPUs")
    processes = int(cfg.get("processes") or cores)
    workers = workers_for(n_tasks, work_s, nodes.count * nodes.cpus)
    # at most as many as the nodes hold beside the solve job (its core): a job more would wait to the end
    fit = max(1, nodes.count * (nodes.cpus // cores) - (1 if nodes.cpus % cores == 0 else 0))
    jobs = int(cfg.get("jobs") or min(fit, math.ceil(workers / processes)))
    mem_mb = nodes.mem_mb * cores // nodes.cpus
    if not cfg.get("memory") and mem_mb < MIN_JOB_MEM_MB:
        raise ConfigError(
            f"partition {nodes.partition}: its nodes report {nodes.mem_mb} MB of memory ({mem_mb} MB for a worker "
            f"job of {cores} cores); give dask.memory"
        )
    memory = cfg.get("memory") or f"{mem_mb}MiB"
    out = {**cfg, "cluster": "slurm", "cores": cores, "processes": processes, "memory": memory, "jobs": jobs}
    out.setdefault("queue", nodes.partition)
    fixed = [f"dask.{k}" for k in ("cores", "processes", "memory", "jobs") if cfg.get(k)]
    after = float(cfg.get("spread_after", SPREAD_AFTER_S))
    why = (
        f"spread over SLURM: {n_tasks} shard tasks of {work_s:.0f} s estimated work (> dask.spread_after = "
        f"{after:g} s) on {jobs} worker jobs of {cores} cores, {processes} processes, --mem={slurm_mem(memory)}: "
        f"{workers} workers wanted (one per task and per {_per_worker_s():g} s of work, at most the CPUs of "
        f"partition {nodes.partition}: {nodes.count} nodes of {nodes.cpus} CPUs, {nodes.mem_mb} MB), half a node "
        f"a job, at most {fit} jobs beside this one" + (f"; fixed by the config: {', '.join(fixed)}" if fixed else "")
    )
    return out, why


def _per_worker_s() -> float:

    return WORK_PER_WORKER_S


def slurm_mem(memory: str | int) -> str:
    """sbatch --mem for ``memory`` (dask's notation, e.g. 1500MB): whole MiB, rounded down, never above what was
    asked (dask-jobqueue itself rounds up to whole GiB from 1 GiB on: 1500MB became 2G, more than a node had
    left beside the solve job)."""
    from dask.utils import parse_bytes

    return f"{max(1, parse_bytes(memory) // 2**20)}M"


def partition_nodes(partition: str | None = None) -> Nodes:
    """The nodes of ``partition`` (default: this job's, ``SLURM_JOB_PARTITION``, else the cluster's default) from
    ``sinfo``; HBVMError (one line) where sinfo fails or lists none."""
    partition = partition or os.environ.get("SLURM_JOB_PARTITION") or None
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%P %N %c %m"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise HBVMError(
            f"spread: cannot read the SLURM nodes (sinfo: {exc}); set spread: false or dask.cluster"
        ) from None
    rows = [line.split() for line in out.splitlines() if len(line.split()) == 4]
    return nodes_of(rows, partition)


def nodes_of(rows: list[list[str]], partition: str | None) -> Nodes:
    """``Nodes`` from ``sinfo -N -o '%P %N %c %m'`` rows (partition, node, CPUs, MB; the default partition marked
    with ``*``): the smallest node of ``partition`` (None: the default one)."""
    mine = [r for r in rows if (r[0].rstrip("*") == partition if partition else r[0].endswith("*"))]
    if not mine:
        raise HBVMError(f"spread: sinfo lists no node of partition {partition or '(the default)'}")
    cpus = min(int(r[2].rstrip("+")) for r in mine)
    mem = min(int(r[3].rstrip("+")) for r in mine)
    return Nodes(mine[0][0].rstrip("*"), len({r[1] for r in mine}), cpus, mem)


def node_interface() -> str | None:
    """This node's network interface for a scheduler that workers on other nodes reach: the first (InfiniBand
    first, then by name) that is up and has an IPv4 address other than loopback, no container or virtual
    bridge; None where there is none."""
    import socket

    import psutil

    stats = psutil.net_if_stats()
    found = []
    for name, addrs in psutil.net_if_addrs().items():
        up = name in stats and stats[name].isup
        ipv4 = [a.address for a in addrs if a.family == socket.AF_INET and not _is_loopback(a.address)]
        if up and ipv4 and not name.startswith(VIRTUAL_IFACES):
            found.append(name)
    return min(found, key=lambda n: (not n.startswith("ib"), n)) if found else None


def job_time_left() -> str | None:
    """The time left of this SLURM job (``squeue -o %L``: [days-]hours:minutes:seconds), the worker jobs' walltime
    (they end with it); None outside a job or without a limit."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    left = out.stdout.strip()
    return left if out.returncode == 0 and left and left[0].isdigit() else None


def spread_cluster(cfg: dict, n_tasks: int, work_s: float) -> tuple[dict, str]:
    """``spread_plan`` on this cluster: the partition's nodes from sinfo, the scheduler on this node's interface
    (unless dask.interface or scheduler_host), the worker jobs ending with this job (unless dask.walltime)."""
    nodes = partition_nodes(cfg.get("queue"))
    out, why = spread_plan(cfg, n_tasks, work_s, nodes)
    if not out.get("interface") and not out.get("scheduler_host"):
        iface = node_interface()
        if iface is None:
            raise HBVMError(
                "spread: this node has no network interface for workers on other nodes; give dask.interface"
            )
        out["interface"] = iface
    if not out.get("walltime") and (left := job_time_left()):
        out["walltime"] = left
    return out, f"{why}; scheduler on {out.get('interface') or out['scheduler_host']}"


def study_spreads(config: dict, study, work_s: float) -> bool:
    """``spreads`` for a study of the plan: a ``save: summary`` study, its shard tasks (``shard_runs`` runs each)
    and its estimated work ``work_s``."""
    if study.cfg.get("save") != "summary":
        return False

    return spreads(config, work_s, -(-len(study.jobs) // shard_size(study, len(study.jobs))))
