"""The plan: the config expanded once per workflow run, written by the parse and read by every job.

The Snakefile's parse expands the config into studies (``loading.load_studies``: problems built, each
instance's identity snapped to its stores, every run named and hashed) and writes them here with
``write_plan``. The job scripts (solve, aggregate, render, the beyond-the-paper steps) and a remote job's own
parse read them back with ``planned_studies``: no config is expanded and no problem fingerprinted again.
A problem is built again only where a job integrates or measures with it (``Instance.problem``, lazily).

The plan is named by a digest of what its expansion reads from the config (``PLANNED_KEYS``), so that
every process of one workflow run, each with its own copy of the config, finds the same file. It is data:
JSON of the studies' fields (nothing in it is imported or evaluated), written atomically (temporary file,
then rename). A job checks that the studies it reads are the ones its rule was given (``check_planned``): a
plan rewritten meanwhile by a run with another problem or config is refused in one line.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import operator
import os
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from hbvm_core.errors import HBVMError

from .collector import paused
from .layout import plan_dir, plan_path
from .loading import load_studies
from .runs import JOB_FIELDS, RUN_FIELDS, Job, PlannedJobs, PlannedRows, _groups_of, _jobs_of, _rows_of, row_columns
from .schema import validate_config
from .study import Instance, Study, StudyMethod, _group_probe

#: the format of a plan file (a reader refuses another)
FORMAT = "hbvm-plan/4"
#: the config keys that the expansion of the studies reads (``loading.load_studies``)
PLANNED_KEYS = ("results", "studies", "method_modules", "limits")
#: what a plan records of an instance and of a method (beside its rows)
INSTANCE_FIELDS = ("key", "values", "params", "fingerprint", "t_end", "period", "structure", "probe")
METHOD_FIELDS = ("label", "name", "entry", "k", "s", "module")
#: plans of other configs kept in a results folder (the newest; older ones are removed when a plan is written)
KEEP = 16


def plan_key(config: dict) -> str:
    """The digest naming the plan of ``config`` (its ``PLANNED_KEYS``, canonical JSON)."""
    planned = {k: config.get(k) for k in PLANNED_KEYS}
    text = json.dumps(planned, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- a study as data and back
def study_record(study: Study) -> dict:
    """A study as JSON-ready data: everything ``load_studies`` computed, problems left out."""
    return {
        "name": study.name,
        "kind": study.study_kind,
        "title": study.title,
        "problem": study.problem,
        "params": study.params,
        "t_end": study.t_end,
        "period": study.period,
        "reference": study.reference,
        "convention": asdict(study.convention),
        "plot": study.plot,
        "expected_rates": study.expected_rates,
        "results": study.results,
        "cfg": study.cfg,
        "dims": list(study.dims),
        "sizes_vary": study.sizes_vary,
        "grid": study.grid,
        "instances": _instance_columns(study.instances),
        "methods": [{f: getattr(m, f) for f in METHOD_FIELDS} | {"rows": row_columns(m.rows)} for m in study.methods],
        **_job_record(study.jobs),
        "runs_digest": study.runs_digest(),  # the name of its solve marker: a job need not hash every run again
    }


def _instance_columns(instances: list[Instance]) -> dict:
    """The instances' ``INSTANCE_FIELDS`` as columns; a probe None while it is still to be computed (a sweep's
    instances: a job computes it where it checks a problem against it, ``shards.shard_spec``)."""
    cols = _columns(instances, tuple(f for f in INSTANCE_FIELDS if f != "probe"))
    return cols | {"probe": [None if inst.probe_pending else inst.probe for inst in instances]}


def _instances_of(cols: dict) -> list[dict]:
    """The instances of ``_instance_columns`` one by one."""
    return [dict(zip(INSTANCE_FIELDS, values)) for values in zip(*(cols[f] for f in INSTANCE_FIELDS))]


def _columns(items, names: tuple) -> dict:
    """Items as columns: name -> list of values (one JSON list each instead of one object per item)."""
    return {name: list(map(operator.attrgetter(name), items)) for name in names}


def _job_record(jobs) -> dict:
    """The jobs (a list, or a study's mapping) as groups (``job_groups``): per run of a method and instance only
    its h, run, store and hash, the other fields once per group (a summary study's expansion has them so already);
    the jobs one by one (``jobs``) where a group's runs differ in another field."""
    if isinstance(jobs, PlannedJobs):  # a group's problem_probe None while its instance's is (``_instance_columns``)
        return _shared_fields(jobs.raw_groups)
    jobs = list(jobs.values() if isinstance(jobs, Mapping) else jobs)
    shared = tuple(f for f in JOB_FIELDS if f not in RUN_FIELDS)
    of_group = operator.attrgetter(*shared)
    groups: list[dict] = []
    seen: set[tuple] = set()  # the (label, combo) of the groups so far
    last = None
    for job in jobs:
        values = of_group(job)
        if last is None or values != last:  # a tuple compares by identity first: a group's runs share their fields
            key = (job.label, job.combo)
            if key in seen:  # a group's runs not together: the jobs as they are
                return {"jobs": [j.as_dict() for j in jobs]}
            seen.add(key)
            groups.append({"fields": dict(zip(shared, values)), "runs": []})
            last = values
        groups[-1]["runs"].append(job)
    return {
        "job_groups": [
            {"fields": g["fields"], "runs": _columns(g["runs"], RUN_FIELDS) | {"hash": [j.hash for j in g["runs"]]}}
            for g in groups
        ]
    }


def _shared_fields(groups: list[dict]) -> dict:
    """The job groups with the fields that every group holds as the same object (a sweep's groups: the problem, the
    method, ...) once (``job_fields``), the others per group (``job_groups``)."""
    if len(groups) < 2:
        return {"job_groups": groups}
    fields = [g["fields"] for g in groups]
    shared = {}
    for key, value in fields[0].items():
        if all(map(operator.is_, map(operator.itemgetter(key), fields), itertools.repeat(value))):
            shared[key] = value
    own = [k for k in fields[0] if k not in shared]
    if not own:
        return {"job_fields": shared, "job_groups": [{"fields": {}, "runs": g["runs"]} for g in groups]}
    of_group = operator.itemgetter(*own)
    rows = map(of_group, fields) if len(own) > 1 else ((v,) for v in map(of_group, fields))
    return {
        "job_fields": shared,
        "job_groups": [{"fields": dict(zip(own, values)), "runs": g["runs"]} for values, g in zip(rows, groups)],
    }


def study_from_record(rec: dict) -> Study:
    """The ``Study`` of a ``study_record``; its problems are built when first asked for (``Instance.problem``)."""
    from hbvm_core.methods import method_from_entry
    from hbvm_core.metrics import ErrorConvention

    cfg, where = rec["cfg"], f"studies.{rec['name']}"
    check = cfg.get("check_derivatives", True)
    instances = [
        Instance(
            i["key"],
            i["values"],
            i["params"],
            None,
            i["fingerprint"],
            i["t_end"],
            i["period"],
            structure=i["structure"],
            probe=i["probe"],
            problem_entry=cfg["problem"],
            check_derivatives=check,
            where=f"{where}[{i['key']}]" if i["key"] else where,
        )  # fmt: skip
        for i in _instances_of(rec["instances"])
    ]
    summary = rec["cfg"].get("save") == "summary" and "job_groups" in rec
    methods = [
        StudyMethod(
            m["label"],
            m["name"],
            m["entry"],
            m["k"],
            m["s"],
            rows=PlannedRows(m["rows"]) if summary else _rows_of(m["rows"]),
            method=method_from_entry(m["entry"]),
            module=m["module"],
        )  # fmt: skip
        for m in rec["methods"]
    ]
    jobs = PlannedJobs(_groups_of(rec)) if summary else {job.id: job for job in _jobs_of(rec)}
    study = Study(
        name=rec["name"],
        study_kind=rec["kind"],
        title=rec["title"],
        problem=rec["problem"],
        params=rec["params"],
        t_end=rec["t_end"],
        period=rec["period"],
        reference=rec["reference"],
        convention=ErrorConvention(**rec["convention"]),
        methods=methods,
        jobs=jobs,
        plot=rec["plot"],
        expected_rates=rec["expected_rates"],
        results=rec["results"],
        cfg=cfg,
        dims=tuple(rec["dims"]),
        sizes_vary=bool(rec["sizes_vary"]),
        grid=rec["grid"],
        instances=instances,
    )
    if isinstance(jobs, PlannedJobs):  # the probes the parse left to be computed: from the instances, when read
        jobs.fill_with(functools.partial(_group_probe, study))
    if isinstance(rec.get("runs_digest"), str):  # Study.runs_digest of these jobs, as the parse computed it
        study._digest = ((id(jobs), len(jobs)), rec["runs_digest"])
    return study


# --------------------------------------------------------------------------- the plan file
def write_plan(config: dict, studies: dict[str, Study]) -> str | None:
    """Write the plan of ``config`` (its expanded ``studies``) to ``layout.plan_path``; returns the path, or None
    when a study holds values that JSON cannot carry or the file cannot be written (a full disk, a read-only
    folder): the jobs then expand the config themselves, and a full disk stops them with its own one line."""

    results = config["results"]
    try:
        with paused():  # a record of 10^5 runs: lists and dicts that live until the text is written
            records = {n: study_record(s) for n, s in studies.items()}
            text = json.dumps({"format": FORMAT, "key": plan_key(config), "studies": records}, allow_nan=True)
    except (TypeError, ValueError):
        return None
    path = plan_path(results, plan_key(config))
    try:
        with open(path) as fh:
            if fh.read() == text:  # unchanged: the file (and its time) left alone
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:  # no temporary left behind
        with contextlib.suppress(OSError):
            os.remove(tmp)
        return None
    _prune(os.path.dirname(path))
    return path


def _prune(folder: str) -> None:
    """Keep the ``KEEP`` newest plans of the folder (other configs' runs, e.g. ``select`` or a changed study)."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(".json")]
        entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
        for e in entries[KEEP:]:
            os.remove(e.path)
    except OSError:  # another run pruning at the same time
        pass


def read_plan(config: dict, names=None) -> dict[str, Study] | None:
    """The studies ``names`` (all when None) of the plan of ``config``, or None when there is none (or it does
    not have them). The modules of ``method_modules`` must have been imported (``planned_studies`` does)."""

    path = plan_path(config["results"], plan_key(config))
    try:
        with open(path) as fh, paused():  # the runs' columns: 10^5 strings and floats that all stay
            plan = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(plan, dict) or plan.get("format") != FORMAT or plan.get("key") != plan_key(config):
        return None
    records = plan.get("studies") or {}
    wanted = list(records) if names is None else list(names)
    if any(name not in records for name in wanted):
        return None
    try:
        return {name: study_from_record(records[name]) for name in wanted}
    except (KeyError, TypeError, ValueError, AttributeError):  # a damaged plan: as if there were none
        return None


def planned_jobs(results: str) -> dict[str, Job]:
    """Every run of the plans in ``results`` (``layout.plan_dir``) by its hash, read as data (no problem built):
    what ``verify`` checks a store against. A plan that cannot be read is skipped."""
    jobs: dict[str, Job] = {}
    try:
        names = sorted(os.listdir(plan_dir(results)))
    except OSError:
        return jobs
    for name in (n for n in names if n.endswith(".json")):
        try:
            with open(os.path.join(plan_dir(results), name)) as fh:
                plan = json.load(fh)
            for rec in plan["studies"].values():
                for job in _jobs_of(rec):  # the plan's job groups, or its jobs one by one
                    jobs[job.hash] = job
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return jobs


def planned_studies(config: dict, names=None) -> dict[str, Study]:
    """The studies of a job: read from the plan its workflow run's parse wrote, or (no plan: a dry run's
    config, a results folder the parse did not see) expanded here (``loading.load_studies``)."""
    from hbvm_core.methods import load_method_modules

    if config.get("method_modules"):  # their methods are part of the schema
        load_method_modules(config["method_modules"])
    validate_config(config)  # fills in the defaults the parse filled in: the same plan key
    studies = read_plan(config, names)
    return studies if studies is not None else load_studies(config, names=names)


def check_planned(study: Study, what: str, expected: Any, found: Any) -> None:
    """HBVMError (one line) when a job's study (from the plan) is not the one its rule was given: ``found`` (the
    plan's ``what``) differs from ``expected`` (the rule's param, or the digest its output names)."""
    if _canonical(expected) != _canonical(found):
        raise HBVMError(
            f"study {study.name}: its plan ({what}) changed while this workflow run was under way (another run "
            f"with another config or problem wrote {plan_dir(study.results)}); run the workflow again"
        )


def _canonical(value: Any) -> str:
    """JSON text of a value, keys sorted (a tuple and a list of the same items are the same)."""
    return json.dumps(value, sort_keys=True, default=repr)
