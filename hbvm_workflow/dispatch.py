"""The solve step's runs and shards on one Dask cluster: the runs of run stores in batches
(``hbvm_workflow.batching``: one task for many small runs, largest first, retried on worker loss), each shard of a
sharded store as a task of its own (``shard_worker.solve_shard``); the cluster the config asks for, or for a
summary study that spreads a SLURMCluster sized from it (``choose_cluster``); what took part, and the one line of
what the file system refused.
"""

from __future__ import annotations

import errno
import hashlib
import os
import platform
import shutil
import time
from collections import Counter
from urllib.parse import urlsplit

from .batching import batches
from .cluster import (
    SPREAD_AFTER_S,
    _problem_module,
    dask_client,
    forks_local_workers,
    is_local,
    ship_problem_module,
    spread,
    spread_cluster,
    study_spreads,
)
from .cluster import describe as where
from .layout import shard_store
from .runs import work_seconds
from .script_support import FILE_ONLY, Progress, plural, tell_studies
from .shard_worker import cold_ensembles, solve_shard
from .shard_worker import warm_up as warm_up_ensembles
from .shards import shard_key
from .storage import clean_temporaries
from .task_args import Packed, call_packed
from .worker import solve_batch, warm_up


def describe(res: dict) -> str:
    """A run's line in its study's solve log: ok, its steps, iterations and seconds; or FAILED and why."""
    if res["status"] == "ok":
        return (
            f"ok, {res['steps']} steps, {res['mean_iterations']:.2f} it/step, "
            f"{res['wall_s']:.2f} s ({res.get('backend', '?')})"
        )
    err = res.get("error") or {}
    return f"FAILED: {err.get('message', err)}"


def cut(todo: list, dask_cfg: dict, threads: int) -> list[list]:
    """The runs in batches sized for the workers planned (``hbvm_workflow.batching``): dask.n_workers or
    the rule's threads."""

    return batches(todo, int(dask_cfg.get("n_workers") or threads))


def batch_key(batch: list) -> str:
    """The Dask key of a batch: its first (largest) run, how many more, and a digest of all their hashes:
    ``solve-<study>-<label>-h<h>-<digest>``, or ``solve-<study>-<label>-h<h>+<more>-<digest>``."""

    first = batch[0]
    more = f"+{len(batch) - 1}" if len(batch) > 1 else ""
    digest = hashlib.sha256("\n".join(j.hash for j in batch).encode()).hexdigest()[:16]
    return f"solve-{first.study}-{first.label}-h{first.h!r}{more}-{digest}"


def compute(
    todo: list,
    studies: dict,
    logs: dict,
    summaries: dict,
    dask_cfg: dict,
    threads: int,
    shards: list | None = None,
    stops: dict | None = None,
    refused: dict | None = None,
    ran: dict | None = None,
) -> list[str]:
    """Every run of ``todo`` and every shard of ``shards`` (``hbvm_workflow.shards.shard_spec``: one Dask task
    each) on one cluster; results into ``summaries``; returns the runs and shards that raised. ``stops`` receives,
    per study, the one line of a shard that found no GPU where the study demands one (``backend: cuda``); ``refused``
    per study, the one line of its shards that the file system refused (``describe_oserrors``); ``ran`` the Dask
    workers that computed runs or shards, address -> host."""
    from distributed import as_completed

    shards = shards or []
    results = _Results(logs, summaries, todo, studies, {} if stops is None else stops, {} if ran is None else ran)
    # facts of the whole job: one line each on stderr (and in each study's log)
    names = {j.study for j in todo} | {spec["study"] for spec in shards}
    if forks_local_workers(dask_cfg):
        _warm_kernels(todo, shards, logs, names, threads)
    batches = cut(todo, dask_cfg, threads) if todo else []
    if todo:
        line = f"{plural(len(todo), 'run')} in {plural(len(batches), 'Dask task')} (batched by estimated work)"
        tell_studies(logs, {j.study for j in todo}, line)
    n_tasks = len(batches) + len(shards)
    workers, per_task = spread(dask_cfg, threads, n_tasks)
    tell_studies(logs, names, f"computing on {where(dask_cfg, workers)}")
    for spec in shards:
        spec["threads"] = per_task
    for name in {spec["study"] for spec in shards}:
        mine = [spec for spec in shards if spec["study"] == name]
        runs = sum(len(spec["compute"]) for spec in mine)
        tell_studies(
            logs,
            {name},
            f"{plural(runs, 'run')} to integrate in {plural(len(mine), 'shard')} (a Dask task each), "
            f"{plural(per_task, 'numba thread')} per shard task",
        )
    runs_total = len(todo) + sum(spec["stop"] - spec["start"] for spec in shards)
    with (
        dask_client(
            dask_cfg,
            threads=workers,
            tasks=n_tasks,
            env={"NUMBA_NUM_THREADS": str(per_task)},
            tell=lambda line: tell_studies(logs, names, line),
        ) as client,
        Progress(runs_total) as results.progress,
    ):
        if not forks_local_workers(dask_cfg):  # forked workers inherit our sys.path
            _ship_modules(client, todo, shards, logs)
        futures, shard_futures = _submit(client, batches, shards, studies, int(dask_cfg.get("retries", 2)))
        for fut in as_completed([*futures, *shard_futures]):
            if fut in shard_futures:
                results.shard(fut, shard_futures[fut])
            else:
                results.batch(fut, futures[fut])
        hosts_of(client, results.ran)
    # every run has finished: what is left is a lost worker's partial store
    for name, study in studies.items():
        for p in clean_temporaries(study.dir):
            logs[name].info(f"removed the temporary {p} of a lost worker")
    refused = {} if refused is None else refused
    for name, res in results.unwritten.items():
        refused[name] = describe_oserrors(studies[name], res, sum(s["study"] == name for s in shards))
    return results.errors


def _warm_kernels(todo: list, shards: list, logs: dict, names: set, threads: int) -> None:
    """The loops of the runs and the shards compiled or loaded before the workers fork (they inherit them), with a
    line per loop (``registry.LoopTime``) and one for all. (An ensemble loop: each worker loads its own from the
    kernel cache, cheaper than a process start here; ``shard_worker.warm_up`` compiles it for a cold cache.)"""
    t1 = time.perf_counter()
    loop_line = lambda studies, line: tell_studies(logs, studies, f"kernel: {line}")  # noqa: E731
    n = warm_up(todo, processes=threads, tell=loop_line)
    n += warm_up_ensembles(shards, threads, tell=loop_line) if cold_ensembles(shards) else 0
    dt = time.perf_counter() - t1
    tell_studies(
        logs,
        names,
        f"kernels of {plural(n, '(problem, method) pair')} ready in {dt:.1f} s (the forked workers inherit)",
    )


def _ship_modules(client, todo: list, shards: list, logs: dict) -> None:
    """The problem and method modules of the runs and the shards uploaded to workers that were not forked from this
    process (a line in each study's log that uses one)."""
    # (study, problem entry) and (study, method module) of the runs and of the shards
    problems = {(j.study, j.problem) for j in todo if isinstance(j.problem, str)}
    problems |= {(sp["study"], p["problem"]) for sp in shards for p in sp["problems"].values()
                 if isinstance(p["problem"], str)}  # fmt: skip
    methods = {(j.study, j.method_module) for j in todo if j.method_module}
    methods |= {(sp["study"], m["module"]) for sp in shards for m in sp["methods"].values() if m["module"]}
    for problem_entry in sorted({entry for _, entry in problems}):
        shipped = ship_problem_module(client, problem_entry)
        for name in {n for n, entry in problems if entry == problem_entry} if shipped else ():
            logs[name].info(f"problem module {shipped} uploaded to the workers")
    for module in sorted({mod for _, mod in methods}):  # config: method_modules
        shipped = ship_problem_module(client, f"{module}:")
        for name in {n for n, mod in methods if mod == module} if shipped else ():
            logs[name].info(f"method module {shipped} uploaded to the workers")


def _submit(client, batches: list[list], shards: list[dict], studies: dict, retries: int) -> tuple[dict, dict]:
    """(future -> batch, future -> shard spec): a task per batch of runs (``worker.solve_batch``) and per shard
    (``shard_worker.solve_shard``), the costliest shards first; their arguments ``Packed`` (not walked by Dask)."""
    entries = {job.problem for batch in batches for job in batch if isinstance(job.problem, str)}  # not a mapping
    modules = {entry: (_problem_module(entry) or ("", ""))[1] for entry in entries}

    def task(job) -> dict:
        return job.as_dict() | {
            "store": os.path.abspath(job.store),
            "study_dir": os.path.abspath(studies[job.study].dir),
            "module_file": modules.get(job.problem, "") if isinstance(job.problem, str) else "",
        }

    futures = {
        client.submit(
            call_packed,
            solve_batch,
            Packed([task(job) for job in batch]),
            key=batch_key(batch),
            retries=retries,
            pure=False,
        ): batch
        for batch in batches
    }
    # the costliest shards first (Dask's priority: higher first), so that a long one does not start last
    rank = {id(spec): -i for i, spec in enumerate(sorted(shards, key=lambda sp: -sp.get("work", 0.0)))}
    shard_futures = {
        client.submit(
            call_packed,
            solve_shard,
            Packed(spec),
            key=shard_key(spec),
            retries=retries,
            pure=False,
            priority=rank[id(spec)],
        ): spec
        for spec in shards
    }
    return futures, shard_futures


class _Results:
    """What the finished tasks of ``compute`` bring: each run's or shard's summary into ``summaries``, its lines in
    its study's log, the progress line, the runs and shards that raised (``errors``), the studies stopped by a
    missing GPU (``stops``), the shards the file system refused (``unwritten``), the workers that took part
    (``ran``)."""

    def __init__(self, logs: dict, summaries: dict, todo: list, studies: dict, stops: dict, ran: dict) -> None:
        self.logs, self.summaries, self.stops, self.ran = logs, summaries, stops, ran
        self.errors: list[str] = []
        self.unwritten: dict[str, list[dict]] = {}  # per study, its shards that the file system refused
        self.count = {name: 0 for name in studies}
        self.total = {name: sum(j.study == name for j in todo) for name in studies}
        self.progress = None

    def shard(self, fut, spec: dict) -> None:
        """A shard task's end: its summary, or the line of what stopped it."""
        from hbvm_core.errors import BackendError

        name, log = spec["study"], self.logs[spec["study"]]
        try:
            res = fut.result()
        except BackendError as exc:  # backend cuda and no GPU on the worker: the study stops, one line
            self.stops.setdefault(name, str(exc))
            log.error(f"shard {spec['slot']}: ERROR {exc}", extra=FILE_ONLY)
            self.progress.update(failed=True)
            return
        except Exception as exc:  # a bug, or a lost worker after the retries: the shard is reported
            self.errors.append(f"{name}: shard {spec['slot']}: {type(exc).__name__}: {exc}")
            log.error(f"shard {spec['slot']}: ERROR {type(exc).__name__}: {exc}", extra=FILE_ONLY)
            self.progress.update(failed=True)
            return
        if "oserror" in res:  # the host's file system refused the shard: said once for the study (compute)
            self.unwritten.setdefault(name, []).append(res)
            log.error(f"shard {res['slot']} on {res['host']}: ERROR {res['oserror']['message']}", extra=FILE_ONLY)
            self.progress.update(failed=True)
            return
        self.summaries[name].setdefault("shards", []).append(res)
        if res.get("worker"):
            self.ran[res["worker"]] = res.get("host") or ""
        note = f"; {res['note']}" if res.get("note") else ""
        log.info(
            f"shard {res['slot']}: {res['computed']} integrated, {res['copied']} copied, {res['failed']} "
            f"failed, {res['wall_s']:.2f} s ({res['backend']}{note})",
            extra=FILE_ONLY,
        )
        self.progress.update(failed=bool(res["failed"]), runs=spec["stop"] - spec["start"])

    def batch(self, fut, batch: list) -> None:
        """A batch task's end: each run's summary and line, in the batch's order (ids repeat across studies)."""
        try:
            results = fut.result()
        except Exception as exc:  # a lost worker after the retries: every run of the batch is reported
            results = [{"id": job.id, "raised": f"{type(exc).__name__}: {exc}"} for job in batch]
        for job, res in zip(batch, results, strict=True):
            log = self.logs[job.study]
            self.count[job.study] += 1
            done = f"{self.count[job.study]}/{self.total[job.study]}"
            if "raised" in res:  # a bug, or a lost worker: report every one
                self.errors.append(f"{job.study}: {job.id}: {res['raised']}")
                # to the log file: the terminal gets every such run in the step's one closing line
                log.error(f"{done} {job.id}: ERROR {res['raised']}", extra=FILE_ONLY)
                self.progress.update(failed=True)
                continue
            if res.get("worker"):
                self.ran.setdefault(res["worker"], "")
            summary = {k: res.get(k) for k in ("status", "steps", "wall_s", "mean_iterations", "error")}
            self.summaries[job.study][job.id] = summary | {"computed": True}
            # the per-run line goes to the study's log only: the progress line counts it on stderr
            log.info(f"{done} {job.id}: {describe(res)}", extra=FILE_ONLY)
            self.progress.update(failed=res.get("status") != "ok")


def choose_cluster(config: dict, studies: dict, specs: list, todo: list, logs: dict) -> dict:
    """The ``dask:`` section of this solve: the config's, or for the shards of one summary study that spreads
    (config ``spread``: ``hbvm_workflow.cluster.spreads``) a SLURMCluster sized from the study and the partition
    (``spread_cluster``); with ``spread`` on, the study's log says which and why, in one line."""

    dask_cfg = config.get("dask") or {}
    names = {spec["study"] for spec in specs}
    if not config.get("spread") or todo or len(names) != 1 or not is_local(dask_cfg) or dask_cfg.get("n_workers"):
        return dask_cfg  # (a cluster the config chose: the "computing on" line names it)
    name = names.pop()
    study, log = studies[name], logs[name]
    work = work_seconds(study.jobs)
    if not study_spreads(config, study, work):
        after = float(dask_cfg.get("spread_after", SPREAD_AFTER_S))
        log.info(
            f"one job: {plural(len(specs), 'shard task')} of {work:.0f} s estimated work for the whole study "
            f"(spread over SLURM: above dask.spread_after = {after:g} s and more than one shard)"
        )
        return dask_cfg
    pending = sum(spec["stop"] - spec["start"] for spec in specs)
    cfg, why = spread_cluster(dask_cfg, len(specs), work * pending / max(1, len(study.jobs)))
    log.info(why)
    return cfg


def hosts_of(client, ran: dict) -> None:
    """Fill in the host of each worker of ``ran`` (address -> host) that has none: asked of the workers still there,
    else the address's host."""

    unknown = [a for a, host in ran.items() if not host]
    found = {}
    if unknown:
        try:
            found = client.run(platform.node, workers=unknown, on_error="ignore")
        except Exception:  # noqa: BLE001 - a worker gone: its address says where it was
            found = {}
    for address in unknown:
        ran[address] = found.get(address) or urlsplit(address).hostname or address


def took_part(ran: dict) -> str:
    """'N Dask workers took part, on host (k), ...': how many workers computed runs, and on which hosts."""

    if not ran:
        return "no Dask worker took part (nothing computed)"
    per_host = Counter(ran.values())
    hosts = ", ".join(f"{host} ({n})" for host, n in sorted(per_host.items()))
    return f"{plural(len(ran), 'Dask worker')} took part, on {plural(len(per_host), 'host')}: {hosts}"


#: the errno values of a full disk (or quota), as ``hbvm_workflow.worker.DiskFull`` takes them
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def describe_oserrors(study, refused: list[dict], tried: int) -> str:
    """One line for the shards of ``study`` that the file system refused (``solve_shard``'s "oserror" results,
    ``tried`` shards computed in all): a full disk in the words of ``worker.DiskFull`` (what is free, where, and
    that the same command completes once space is freed), any other error with its first message."""

    store = shard_store(study.results, study.name)
    slots = sorted(r["slot"] for r in refused)
    which = ", ".join(map(str, slots[:5])) + (", ..." if len(slots) > 5 else "")
    hosts = ", ".join(sorted({r["host"] for r in refused}))
    shard = "shards" if len(slots) > 1 else "shard"
    head = f"study {study.name}: {len(slots)} of {plural(tried, 'shard')} ({shard} {which}; on {hosts})"
    if all(r["oserror"]["errno"] in NO_SPACE for r in refused):
        try:
            free = f"{shutil.disk_usage(study.dir).free / 1e6:.3g} MB free"
        except OSError:
            free = "free space unknown"
        return (
            f"{head}: no space left on the device while writing {store} ({free} in {study.dir}); their runs were "
            "not kept, every other shard was: free space, then run the same command again"
        )
    first = next(r for r in refused if r["oserror"]["errno"] not in NO_SPACE)["oserror"]
    return (
        f"{head} could not be written to {store}: [Errno {first['errno']}] {first['message']}; their runs were "
        "not kept, every other shard was: run the same command again once the file system is writable"
    )
