"""Rules solve / solve_study: compute the missing runs of the studies on one Dask cluster, then write their manifests.

A run whose store is complete for the same parameter hash (or that failed
before, unless retry_failed) is reused; every other run of every study is
submitted to the one cluster in batches (``hbvm_workflow.batching``: one task for
many small runs, largest first, retried on worker loss) and written atomically by
the worker. Each study logs to its own file
(logs/<study>/solve.log) and gets its own manifest results/<study>/solve.json.
"""

import errno
import json
import logging
import os
import sys
import time

# One BLAS/OpenMP thread here and in the (forked) workers: the workers are the parallelism. Numba may use up to
# the rule's threads: a shard task on a local cluster with fewer tasks than cores runs its ensemble on several
# (``spread``); this process never runs a parallel loop, so its forked workers may start their own thread pools.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
if "numba" not in sys.modules:  # (a test that runs this script in its own process: numba's config is read already)
    os.environ["NUMBA_NUM_THREADS"] = str(max(1, int(getattr(globals().get("snakemake"), "threads", 1) or 1)))


def describe(res: dict) -> str:
    if res["status"] == "ok":
        return (
            f"ok, {res['steps']} steps, {res['mean_iterations']:.2f} it/step, "
            f"{res['wall_s']:.2f} s ({res.get('backend', '?')})"
        )
    err = res.get("error") or {}
    return f"FAILED: {err.get('message', err)}"


def reuse(study, retry_failed: bool, log: logging.Logger) -> tuple[list, dict]:
    """(runs to compute, summary of the reused ones by job id) of one study."""
    from hbvm_workflow.script_support import plural
    from hbvm_workflow.storage import Expected, clean_temporaries, mismatch_phrase, set_aside, store_verdict

    for p in clean_temporaries(study.dir):
        log.info(f"removed the leftover temporary {p}")
    legacy = remove_legacy_stores(study)
    if legacy:
        log.warning(
            f"removed {legacy} run store(s) in the older folder layout (<run>.zarr): a run store is one "
            f"file <run>.zarr.zip now; those runs are computed again"
        )
    todo, summary = [], {}
    for job in study.jobs.values():
        # the one predicate of a good store (the aggregation and the readers decide by it too); stale: another
        # hash or format (replaced when recomputed); damaged, altered (its attrs edited): set aside, recomputed
        verdict = store_verdict(job.store, Expected.of_job(job))
        status, a = verdict.status, verdict.attrs
        if status in ("damaged", "altered"):
            aside = set_aside(job.store)
            where = f"; set aside as {aside}" if aside else ""
            if status == "damaged":
                array = f"array {verdict.array}: " if verdict.array else ""
                log.warning(f"damaged store {job.store}: {array}{verdict.why}{where}; recomputing it")
            else:
                log.warning(f"store {job.store} {mismatch_phrase(verdict)}{where}; recomputing it")
        if status == "complete":
            summary[job.id] = {"status": "ok", "steps": a["steps"], "wall_s": a.get("wall_s"), "computed": False}
        elif status == "failed" and not retry_failed:
            summary[job.id] = {"status": "failed", "steps": job.steps, "error": a.get("error"), "computed": False}
        else:
            todo.append(job)
    log.info(f"{plural(len(study.jobs), 'run')}: {len(summary)} reused, {len(todo)} to compute")
    return todo, summary


def remove_legacy_stores(study) -> int:
    """Remove the study's run stores (and failure markers) of the folder layout; returns how many."""
    from hbvm_workflow.layout import legacy_store
    from hbvm_workflow.storage import FAILED, remove_path

    removed = 0
    for job in study.jobs.values():
        old = legacy_store(job.store)
        for path in (old, old + FAILED) if old else ():
            if os.path.lexists(path):
                remove_path(path)
                removed += path == old
    return removed


def cut(todo: list, dask_cfg: dict, threads: int) -> list[list]:
    """The runs in batches sized for the workers planned (``hbvm_workflow.batching``): dask.n_workers or
    the rule's threads."""
    from hbvm_workflow.batching import batches

    return batches(todo, int(dask_cfg.get("n_workers") or threads))


def batch_key(batch: list) -> str:
    """The Dask key of a batch: its first (largest) run, how many more, and a digest of all their hashes:
    ``solve-<study>-<label>-h<h>-<digest>``, or ``solve-<study>-<label>-h<h>+<more>-<digest>``."""
    import hashlib

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

    from hbvm_core.errors import BackendError
    from hbvm_workflow.cluster import _problem_module, dask_client, forks_local_workers, ship_problem_module, spread
    from hbvm_workflow.cluster import describe as where
    from hbvm_workflow.script_support import FILE_ONLY, Progress, plural, tell_studies
    from hbvm_workflow.shard_worker import cold_ensembles, solve_shard
    from hbvm_workflow.shard_worker import warm_up as warm_up_ensembles
    from hbvm_workflow.shards import shard_key
    from hbvm_workflow.storage import clean_temporaries
    from hbvm_workflow.worker import solve_batch, warm_up

    shards = shards or []
    stops = {} if stops is None else stops
    refused = {} if refused is None else refused
    ran = {} if ran is None else ran
    unwritten: dict[str, list[dict]] = {}  # per study, its shards that the file system refused (solve_shard)
    # facts of the whole job: one line each on stderr (and in each study's log)
    names = {j.study for j in todo} | {spec["study"] for spec in shards}
    if forks_local_workers(dask_cfg):
        t1 = time.perf_counter()
        # (the ensemble loops: each worker loads its own from the kernel cache; warming them here would cost a
        # process start each, more than a load -- hbvm_workflow.shard_worker.warm_up does it for a cold cache)
        # a line per loop compiled or loaded: (problem, method), the loop, its seconds (registry.LoopTime)
        loop_line = lambda studies, line: tell_studies(logs, studies, f"kernel: {line}")  # noqa: E731
        n = warm_up(todo, processes=threads, tell=loop_line)
        n += warm_up_ensembles(shards, threads, tell=loop_line) if cold_ensembles(shards) else 0
        dt = time.perf_counter() - t1
        pairs = plural(n, "(problem, method) pair")
        tell_studies(logs, names, f"kernels of {pairs} ready in {dt:.1f} s (the forked workers inherit)")
    batches = cut(todo, dask_cfg, threads) if todo else []
    tasks = plural(len(batches), "Dask task")
    if todo:
        tell_studies(
            logs, {j.study for j in todo}, f"{plural(len(todo), 'run')} in {tasks} (batched by estimated work)"
        )
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
    errors = []
    count = {name: 0 for name in studies}
    total = {name: sum(j.study == name for j in todo) for name in studies}
    runs_total = len(todo) + sum(spec["stop"] - spec["start"] for spec in shards)
    with (
        dask_client(
            dask_cfg,
            threads=workers,
            tasks=n_tasks,
            env={"NUMBA_NUM_THREADS": str(per_task)},
            tell=lambda line: tell_studies(logs, names, line),
        ) as client,
        Progress(runs_total) as progress,
    ):
        if not forks_local_workers(dask_cfg):  # forked workers inherit our sys.path
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
        entries = {job.problem for job in todo if isinstance(job.problem, str)}  # a mapping (expressions) has no module
        modules = {entry: (_problem_module(entry) or ("", ""))[1] for entry in entries}
        futures = {
            client.submit(
                solve_batch,
                [
                    job.as_dict()
                    | {
                        "store": os.path.abspath(job.store),
                        "study_dir": os.path.abspath(studies[job.study].dir),
                        "module_file": modules.get(job.problem, "") if isinstance(job.problem, str) else "",
                    }
                    for job in batch
                ],
                key=batch_key(batch),
                retries=int(dask_cfg.get("retries", 2)),
                pure=False,
            ): batch
            for batch in batches
        }
        retries = int(dask_cfg.get("retries", 2))
        # the costliest shards first (Dask's priority: higher first), so that a long one does not start last
        rank = {id(spec): -i for i, spec in enumerate(sorted(shards, key=lambda sp: -sp.get("work", 0.0)))}
        shard_futures = {
            client.submit(
                solve_shard, spec, key=shard_key(spec), retries=retries, pure=False, priority=rank[id(spec)]
            ): spec
            for spec in shards
        }
        for fut in as_completed([*futures, *shard_futures]):
            if fut in shard_futures:
                spec = shard_futures[fut]
                name, log = spec["study"], logs[spec["study"]]
                try:
                    res = fut.result()
                except BackendError as exc:  # backend cuda and no GPU on the worker: the study stops, one line
                    stops.setdefault(name, str(exc))
                    log.error(f"shard {spec['slot']}: ERROR {exc}", extra=FILE_ONLY)
                    progress.update(failed=True)
                    continue
                except Exception as exc:  # a bug, or a lost worker after the retries: the shard is reported
                    errors.append(f"{name}: shard {spec['slot']}: {type(exc).__name__}: {exc}")
                    log.error(f"shard {spec['slot']}: ERROR {type(exc).__name__}: {exc}", extra=FILE_ONLY)
                    progress.update(failed=True)
                    continue
                if "oserror" in res:  # the host's file system refused the shard: said once for the study, below
                    unwritten.setdefault(name, []).append(res)
                    log.error(
                        f"shard {res['slot']} on {res['host']}: ERROR {res['oserror']['message']}", extra=FILE_ONLY
                    )
                    progress.update(failed=True)
                    continue
                summaries[name].setdefault("shards", []).append(res)
                if res.get("worker"):
                    ran[res["worker"]] = res.get("host") or ""
                note = f"; {res['note']}" if res.get("note") else ""
                log.info(
                    f"shard {res['slot']}: {res['computed']} integrated, {res['copied']} copied, {res['failed']} "
                    f"failed, {res['wall_s']:.2f} s ({res['backend']}{note})",
                    extra=FILE_ONLY,
                )
                progress.update(failed=bool(res["failed"]), runs=spec["stop"] - spec["start"])
                continue
            batch = futures[fut]
            try:
                results = fut.result()
            except Exception as exc:  # a lost worker after the retries: every run of the batch is reported
                results = [{"id": job.id, "raised": f"{type(exc).__name__}: {exc}"} for job in batch]
            for job, res in zip(batch, results, strict=True):  # in the batch's order (ids repeat across studies)
                log = logs[job.study]
                count[job.study] += 1
                done = f"{count[job.study]}/{total[job.study]}"
                if "raised" in res:  # a bug, or a lost worker: report every one
                    errors.append(f"{job.study}: {job.id}: {res['raised']}")
                    # to the log file: the terminal gets every such run in the step's one closing line
                    log.error(f"{done} {job.id}: ERROR {res['raised']}", extra=FILE_ONLY)
                    progress.update(failed=True)
                    continue
                if res.get("worker"):
                    ran.setdefault(res["worker"], "")
                summary = {k: res.get(k) for k in ("status", "steps", "wall_s", "mean_iterations", "error")}
                summaries[job.study][job.id] = summary | {"computed": True}
                # the per-run line goes to the study's log only: the progress line counts it on stderr
                log.info(f"{done} {job.id}: {describe(res)}", extra=FILE_ONLY)
                progress.update(failed=res.get("status") != "ok")
        hosts_of(client, ran)
    # every run has finished: what is left is a lost worker's partial store
    for name, study in studies.items():
        for p in clean_temporaries(study.dir):
            logs[name].info(f"removed the temporary {p} of a lost worker")
    for name, results in unwritten.items():
        refused[name] = describe_oserrors(studies[name], results, sum(s["study"] == name for s in shards))
    return errors


def choose_cluster(config: dict, studies: dict, specs: list, todo: list, logs: dict) -> dict:
    """The ``dask:`` section of this solve: the config's, or for the shards of one summary study that spreads
    (config ``spread``: ``hbvm_workflow.cluster.spreads``) a SLURMCluster sized from the study and the partition
    (``spread_cluster``); with ``spread`` on, the study's log says which and why, in one line."""
    from hbvm_workflow.cluster import SPREAD_AFTER_S, is_local, spread_cluster, study_spreads
    from hbvm_workflow.runs import work_seconds
    from hbvm_workflow.script_support import plural

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
    import platform
    from urllib.parse import urlsplit

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
    from collections import Counter

    from hbvm_workflow.script_support import plural

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
    import shutil

    from hbvm_workflow.layout import shard_store
    from hbvm_workflow.script_support import plural

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


def write_manifest(study, summary: dict, path: str) -> dict:
    """results/<study>/solve.json: every run, its status and, for a stored run, its file signature
    (size and mtime: a store changed afterwards is found at the next parse without opening it)."""
    from hbvm_workflow.storage import file_signature

    jobs = []
    for job in study.jobs.values():
        jobs.append(
            {
                "id": job.id,
                "label": job.label,
                "name": job.name,
                "h": job.h,
                "t_end": job.t_end,
                "store": os.path.relpath(job.store, study.dir),
                "hash": job.hash,
                **summary[job.id],
                **({"stat": file_signature(job.store)} if summary[job.id]["status"] == "ok" else {}),
            }
        )
    computed = [j["id"] for j in jobs if j["computed"]]
    failed = [j["id"] for j in jobs if j["status"] == "failed"]
    manifest = {"study": study.name, "jobs": jobs, "computed": computed, "failed": failed}
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as fh:
            json.dump(manifest, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:  # a full disk: no temporary left behind
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return manifest


def write_shard_manifest(study, table, summary: dict, path: str) -> dict:
    """results/<study>/solve.json of a sharded study (``save: summary``): its store, each shard's record, and how
    many runs were integrated, copied from an earlier store, reused in complete shards, and failed."""
    from hbvm_workflow.shards import finish, manifest_entry

    finish(study)  # every shard complete: an earlier store of other runs is removed
    done = summary.get("shards", [])
    entry = manifest_entry(study, table)
    manifest = {
        "study": study.name,
        "save": "summary",
        **entry,
        "computed": sum(r["computed"] for r in done),
        "copied": sum(r["copied"] for r in done),
        "reused": summary["reused"],
        "failed": sum(s["failed"] or 0 for s in entry["shards"]),
    }
    if manifest["failed"]:  # the report at exit names the first and counts them by reason (hbvm_workflow.outcome)
        manifest["failed_runs"], manifest["failed_reasons"] = failed_of_shards(study, entry)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)
    return manifest


#: how many failed runs of a sharded study its manifest names (all are counted, by reason)
NAMED_FAILED = 10


def failed_of_shards(study, entry: dict) -> tuple[list[str], dict[str, int]]:
    """(the ids of the first ``NAMED_FAILED`` failed runs, {reason: how many}) of a sharded study: the status column
    of ``counts`` of each shard whose record counts failed runs (``entry``: ``shards.manifest_entry``)."""
    import numpy as np

    from hbvm_workflow.ensemble_errors import STATUS_WORDS
    from hbvm_workflow.runs import PlannedJobs
    from hbvm_workflow.shards import COUNTS, read_rows

    store = os.path.join(study.dir, entry["store"])
    rows, codes = [], []
    for shard in entry["shards"]:
        if shard["failed"]:
            status = read_rows(store, "counts", np.arange(shard["start"], shard["stop"]))[:, COUNTS.index("status")]
            bad = np.flatnonzero(status != 0)
            rows += (bad + shard["start"]).tolist()
            codes += status[bad].tolist()
    reasons: dict[str, int] = {}
    for code in codes:
        word = STATUS_WORDS.get(int(code), f"status {int(code)}")
        reasons[word] = reasons.get(word, 0) + 1
    ids = (study.jobs.ids() if isinstance(study.jobs, PlannedJobs) else list(study.jobs)) if rows else []
    return [ids[i] for i in rows[:NAMED_FAILED]], reasons


def write_runs_marker(study) -> None:
    """results/<study>/.runs-<digest> (hbvm_workflow.layout.runs_marker): the set of runs the manifest is of;
    the study's markers of other sets are removed."""
    from hbvm_workflow.layout import runs_marker

    path = runs_marker(study.results, study.name, study.runs_digest())
    prefix = os.path.basename(runs_marker(study.results, study.name, ""))
    for name in os.listdir(study.dir):
        if name.startswith(prefix) and name != os.path.basename(path):
            os.remove(os.path.join(study.dir, name))
    # the runs' hashes (a sharded study: their number; the store holds each run's hash as a coordinate)
    runs = {"runs": len(study.jobs)} if study.cfg.get("save") == "summary" else study.job_hashes()
    with open(path + ".tmp", "w") as fh:
        json.dump(runs, fh)
        fh.write("\n")
    os.replace(path + ".tmp", path)


def main(smk) -> None:
    from hbvm_workflow.script_support import job_locks, one_line_errors

    names = list(smk.params.studies)
    with one_line_errors(smk.log), job_locks(smk.config, names):
        try:
            solve(smk, names)
        except OSError as exc:  # a full disk here (a store created, a manifest): one line, as the shards' own
            said = no_space(exc, smk.config.get("results", "results"))
            if said is exc:
                raise
            raise said from None


def no_space(exc: OSError, results: str) -> BaseException:
    """An HBVMError of one line for a full disk (``NO_SPACE``) met by the solve process itself; any other error
    as it is."""
    import shutil

    from hbvm_core.errors import HBVMError

    if isinstance(exc, HBVMError) or exc.errno not in NO_SPACE:
        return exc
    try:
        free = f"{shutil.disk_usage(results).free / 1e6:.3g} MB free"
    except OSError:
        free = "free space unknown"
    where = exc.filename or results
    return HBVMError(
        f"no space left on the device while writing {where} ({free} in {results}); nothing of it was kept: free "
        "space, then run the same command again"
    )


def solve(smk, names: list) -> None:
    """The solve step of the studies ``names``, holding their locks."""
    from hbvm_workflow import summary_job
    from hbvm_workflow.layout import runs_marker
    from hbvm_workflow.plan import check_planned, planned_studies
    from hbvm_workflow.script_support import as_list, study_logger

    config = smk.config
    manifests = dict(zip(names, as_list(smk.output.manifest)))
    solve_logs = getattr(smk.log, "solve", None) or smk.log  # named (solve, aggregate) in this workflow's rules
    logs = {name: study_logger("solve", name, path) for name, path in zip(names, as_list(solve_logs))}
    t0 = time.perf_counter()
    studies = planned_studies(config, names)  # the parse's expansion (hbvm_workflow.plan)
    markers = set(as_list(smk.output.runs)) if hasattr(smk.output, "runs") else set()
    aggregates = summary_job.job_outputs(smk)  # the summary studies this job aggregates
    for name, study in studies.items():  # the runs this job was given: the markers it writes, or its param
        found = study.runs_digest()
        expected = found if runs_marker(study.results, name, found) in markers else getattr(smk.params, "runs", None)
        check_planned(study, "its runs", expected, found)
        if name in aggregates:  # and the keys that define its numbers
            summary_job.check_numbers(study, getattr(smk.params, "numbers", None))

    from hbvm_workflow import shards as sharded

    retry_failed = bool(config.get("retry_failed", False))
    todo, summaries, specs, tables = [], {}, [], {}
    for name, study in studies.items():
        if study.cfg.get("save") == "summary":  # one sharded store (hbvm_workflow.shards)
            tables[name], pending, summaries[name] = sharded.prepare(study, retry_failed, logs[name])
            specs += [sharded.shard_spec(study, tables[name], shard) for shard in pending]
            continue
        pending, summaries[name] = reuse(study, retry_failed, logs[name])
        todo += pending
    dask_cfg = choose_cluster(config, studies, specs, todo, logs)
    stops: dict = {}
    refused: dict = {}
    ran: dict = {}  # the Dask workers that computed something: address -> host
    computing = bool(todo or specs)
    errors = (
        compute(todo, studies, logs, summaries, dask_cfg, smk.threads, specs, stops, refused, ran) if computing else []
    )
    workers = f"; {took_part(ran)}" if computing else ""
    if errors or stops or refused:  # one line (the solve step's log has every run's): no traceback on the terminal
        from hbvm_core.errors import BackendError, HBVMError

        raised = [f"{len(errors)} run(s) raised: " + "; ".join(errors)] if errors else []
        raise (BackendError if stops else HBVMError)("; ".join([*stops.values(), *refused.values(), *raised]))

    for name, study in studies.items():
        if name in tables:
            m = write_shard_manifest(study, tables[name], summaries[name], manifests[name])
            write_runs_marker(study)
            backends = sorted({r["backend"] for r in summaries[name].get("shards", []) if r["computed"]})
            logs[name].info(
                f"done in {time.perf_counter() - t0:.1f} s: {m['computed']} computed, {m['copied']} copied, "
                f"{m['reused']} reused, {m['failed']} failed"
                + (f" (on {', '.join(backends)})" if backends else "")
                + workers
            )
            if name in aggregates:  # its numbers, here: no job of their own (hbvm_workflow.summary_job)
                out = aggregates[name]
                workers = max(1, int(smk.threads))
                summary_job.aggregate(study, out["zarr"], out["csv"], out["timings"], out["log"], workers)
            continue
        m = write_manifest(study, summaries[name], manifests[name])
        write_runs_marker(study)
        logs[name].info(
            f"done in {time.perf_counter() - t0:.1f} s: {len(m['computed'])} computed, "
            f"{len(m['jobs']) - len(m['computed'])} reused, {len(m['failed'])} failed{workers}"
        )


if __name__ == "__main__":
    from hbvm_workflow.script_support import end_process

    main(snakemake)  # noqa: F821
    end_process()  # its outputs written: no teardown of the solve's modules and objects
