"""Studies: a config entry -> (problem, method, h) jobs with stable ids, hashes and store paths.

A study (config ``studies: <name>:``) names a problem, a list of method entries
(each passed to ``hbvm_core.methods.method_from_entry``), an interval (``t_end`` or
``periods``), a step-size rule and an error convention (docs/method.md section 5).
``expand_study`` checks all of it and returns a ``Study`` whose ``rows`` are the
table rows and whose ``jobs`` are the trajectories to compute: the rows' runs
plus, for ``errors.reference: self``, the h/2 partner runs.

A ``grid`` (keyword of the problem factory -> list of values; several keys: their
Cartesian product, the last key fastest) makes one problem instance
(``Instance``) per combination, with ``params`` as the fixed values: each has its
own rows, runs (job id ``<label>/<combo>/<run>``, ``layout.combo_name``: ``L=0.5``)
and h/2 partners. Without a grid the study has one instance, named "".

Step-size rules (on the study, or on one method entry to override it):

- ``h: [h_1, h_2, ...]``                      explicit step sizes (rows labelled by h)
- ``h0: 0.1, halvings: 8``                    h_n = h0 2^-n, n = 0..halvings
- ``period_divisions: [10, 20]`` or ``{start: 10, step: 10, stop: 100}``   h_n = T / n

A run (and its job id ``<label>/<run>``) is named by the row label for the numbered
rules (``n=3``; the h/2 partner of ``errors.reference: self`` by the n of the halved
step: n + 1 for halvings, 2 n for period divisions) and by the step size as written
otherwise (``h=0.1``; see ``layout.run_stem``). Two runs of a method with one name
are a ConfigError.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hbvm_core.errors import ConfigError, NonFiniteError, ProblemError
from hbvm_core.methods import method_label  # noqa: F401  (re-exported)
from hbvm_core.problems import problem_name

from .collector import paused
from .grid_plan import Steps, family_instances
from .grids import grid_values
from .kinds import KINDS
from .layout import (  # noqa: F401
    COLUMNS,
    EXTRA,
    MEASURED,
    TIMINGS,
    combo_name,
    manifest_path,
    run_stem,
    shard_store,
    store_path,
    study_dir,
)
from .runs import (
    JOB_FIELDS,
    ROW_FIELDS,
    RUN_FIELDS,
    Job,
    PlannedJobs,
    PlannedRows,
    Row,
    _pairs_json,
    hashes_at,
)
from .schema import defaults
from .storage import FAILED, RunNotFoundError, read_attrs, read_failure
from .templates import Template, json_scalar, json_texts

STEP_KEYS = ("h", "h0", "halvings", "period_divisions")
METHOD_META_KEYS = (*STEP_KEYS, "label")
REFERENCES = ("exact", "reference", "self", "none")
#: the most rows of a Zarr chunk (schema.yaml: chunk): a chunk is built in memory
MAX_CHUNK = 2**22
#: whether a summary study's grid is planned as arrays where its problem's family allows (``grid_plan``); False:
#: instance by instance (the route the arrays are compared with)
ARRAYS = contextvars.ContextVar("hbvm_grid_arrays", default=True)


class _Probe:
    """``Instance.probe``: the text as set, or, set to None (a summary study's parse), the problem's probe computed
    when first read (the plan, a shard's task): a dry run or a rerun with nothing to do never evaluates it."""

    def __get__(self, inst, owner=None) -> str:
        if inst is None:
            return ""  # the field's default
        text = inst.__dict__.get("_probe")
        if text is None:
            from hbvm_core.fingerprint import problem_probe

            probe = problem_probe(inst.problem)
            text = inst.__dict__["_probe"] = json.dumps(probe, sort_keys=True)
            inst._checked = (inst.structure, probe)  # the problem agrees with its own values
        return text

    def __set__(self, inst, text: str | None) -> None:
        inst.__dict__["_probe"] = "" if isinstance(text, _Probe) else text  # the descriptor: the field's default


@dataclass
class Instance:
    """One problem instance of a study: a combination of its ``grid`` values (the only one, key "", without
    a grid), the problem built from the config with them, its identity and interval.

    The identity (``fingerprint``) is the one the study's stores record for the same structure and
    values that agree to round-off (``hbvm_core.fingerprint.problem_identity``); ``probe`` holds the
    reference values it was recorded with (JSON text), that a worker compares its problem with."""

    key: str
    values: dict
    params: dict
    #: the problem as built; None until first asked for (``problem``) in a study read from the plan
    built: Any = field(repr=False, compare=False)
    fingerprint: str
    t_end: float
    period: float | None
    structure: str = ""
    probe: str = field(default=_Probe(), repr=False)  # type: ignore[assignment]  # a lazy text (``_Probe``)
    #: what builds the problem when ``built`` is None: the config's problem, its check_derivatives and the
    #: study's key in messages
    problem_entry: Any = field(default=None, repr=False, compare=False)
    check_derivatives: bool = field(default=True, repr=False, compare=False)
    where: str = field(default="", repr=False, compare=False)
    #: (structure, probe) once ``problem`` is known to be the planned identity (``checked``)
    _checked: Any = field(default=None, repr=False, compare=False)

    @property
    def probe_pending(self) -> bool:
        """True while ``probe`` is still to be computed (when first read)."""
        return self.__dict__.get("_probe") is None

    def checked(self) -> tuple[str, dict] | None:
        """The planned identity (structure, probe values), after checking once that ``problem`` (as built in this
        process) is it; readers of the stores compare their records with it instead of evaluating the problem
        for each store. HBVMError (one line) when the problem changed since the plan; None without an identity."""
        if self._checked is None and self.structure:
            from hbvm_core.errors import HBVMError
            from hbvm_core.fingerprint import problem_mismatch

            probe = json.loads(self.probe) if self.probe else None
            why = problem_mismatch(self.problem, self.structure, probe)
            if why is not None:
                raise HBVMError(
                    f"{self.where or 'study'}: the problem is not the one planned when the workflow run started "
                    f"({why}); run the workflow again"
                )
            self._checked = (self.structure, probe)
        return self._checked

    @property
    def problem(self):
        """The instance's problem, built from the config once (``build_problem``: a study read from the plan
        builds it only where a job integrates or measures with it)."""
        if self.built is None:
            self.built = build_problem(self.where, self.problem_entry, self.params, self.check_derivatives)
        return self.built


@dataclass
class StudyMethod:
    """A method of a study: its label, display name, entry (for ``method_from_entry``) and rows."""

    label: str
    name: str
    entry: dict
    k: int | None
    s: int | None
    rows: list[Row] = field(default_factory=list)
    #: the method object (its claims: ``orders``, ``conserves``) and the module that registers it when outside
    #: hbvm_core
    method: Any = field(default=None, repr=False, compare=False)
    module: str = ""


@dataclass
class Study:
    """An expanded study: rows per method, jobs by id, the error convention."""

    name: str
    study_kind: str
    title: str
    problem: str
    params: dict
    t_end: float
    period: float | None
    reference: str
    convention: Any  # hbvm_core.metrics.ErrorConvention (reference "none": invariants only)
    methods: list[StudyMethod]
    jobs: dict[str, Job]
    plot: str
    expected_rates: dict
    results: str
    cfg: dict
    #: (m, nu) of the problem, the largest over the grid's instances (a grid over a chain's size)
    dims: tuple[int, int] = (0, 0)
    #: whether the grid's instances differ in m (a grid over a chain's size); a grid planned as arrays differs in
    #: values only
    sizes_vary: bool = False
    #: the problem built from the config (once, by expand_study); read it as ``built_problem``
    _problem: Any = field(default=None, repr=False, compare=False)
    #: the grid (key -> values) and one Instance per combination (the one instance, key "", without a grid)
    grid: dict = field(default_factory=dict)
    instances: list = field(default_factory=list)
    #: ((id, size) of jobs, runs_digest) once computed
    _digest: Any = field(default=None, repr=False, compare=False)
    #: ((id, size) of instances, {key: Instance}) once asked (``instance_of``)
    _by_key: Any = field(default=None, repr=False, compare=False)

    def grid_positions(self) -> Callable[[dict], tuple[int, ...]]:
        """values -> the position of a combination's values along each grid key (a row's or an Instance's
        ``values``), by a lookup per key: a list's ``index`` per row is quadratic in the grid's size."""
        lookups = []
        for key, values in self.grid.items():
            try:
                lookups.append((key, values, {v: i for i, v in reversed(list(enumerate(values)))}))
            except TypeError:  # unhashable values (lists): found by index
                lookups.append((key, values, None))
        return lambda combo: tuple(values.index(combo[k]) if d is None else d[combo[k]] for k, values, d in lookups)

    def instance_of(self, combo: str) -> Instance:
        """The Instance of a grid combination (a Row's or Job's ``combo``); a dict lookup, built once per list of
        instances (a plot or table asks once per row)."""
        key = (id(self.instances), len(self.instances))
        if self._by_key is None or self._by_key[0] != key:
            self._by_key = (key, {inst.key: inst for inst in self.instances})
        inst = self._by_key[1].get(combo)
        if inst is not None:
            return inst
        if not combo:  # a Study made by hand, without instances
            return Instance("", {}, dict(self.params), self.built_problem, "", self.t_end, self.period)

        raise RunNotFoundError(f"study {self.name!r} has no grid combination {combo!r}")

    def problem_of(self, item) -> Any:
        """The problem, built from the config, of a Row or Job (its grid combination's)."""
        return self.instance_of(getattr(item, "combo", "")).problem

    @property
    def built_problem(self):
        """The study's problem, built from the config once (readers of stores take it from here, never from a store)."""
        if self._problem is None and self.instances:  # a study read from the plan: its first instance's
            self._problem = self.instances[0].problem
        if self._problem is None:
            from hbvm_core.checks import derivative_checks
            from hbvm_core.problems import get_problem

            with derivative_checks(self.cfg.get("check_derivatives", True)):
                self._problem = get_problem(self.cfg.get("problem", self.problem), **self.params)
        return self._problem

    @property
    def dir(self) -> str:

        return study_dir(self.results, self.name)

    @property
    def rows(self) -> list[Row]:
        return [r for m in self.methods for r in m.rows]

    @property
    def row_label(self) -> str:
        """'n' when every method's rows are numbered (halvings, period divisions), else 'h'."""
        return "n" if all(r.n is not None for r in self.rows) else "h"

    def job_hashes(self) -> list[list[str]]:
        """[[id, hash], ...]: what the study's runs are."""
        if isinstance(self.jobs, PlannedJobs):  # a sweep's columns, not built as Jobs
            return self.jobs.job_hashes()
        return [[i, j.hash] for i, j in self.jobs.items()]  # a job's key is its id

    def runs_digest(self) -> str:
        """A digest of ``job_hashes``: the name of the solve step's marker of this set of runs
        (``layout.runs_marker``), so that a changed study reruns its solve step. Computed once per set of jobs
        (the parse asks for it in several rules)."""
        key = (id(self.jobs), len(self.jobs))
        if self._digest is None or self._digest[0] != key:
            if isinstance(self.jobs, PlannedJobs):  # a sweep's columns (read from a plan: it records the digest)
                text = _pairs_json(self.jobs.ids(), self.jobs.hashes())
            else:
                text = _pairs_json(list(self.jobs), [j.hash for j in self.jobs.values()])
            self._digest = (key, hashlib.sha256(text.encode()).hexdigest()[:16])
        return self._digest[1]


#: Study keys that change only how the numbers are shown (tables, figure) or checked, never the numbers: the
#: workflow's rule aggregate does not rerun for them, rule render does.
PRESENTATION_KEYS = ("title", "plot", "figure", "expected_rates", "accuracy_targets", "check_derivatives", "strict")
#: Study keys that choose where the runs are computed: they count in the run hashes where they change the numbers
#: (a trajectory study's numpy or compiled loop; a change reruns what the hashes say, and what follows), never
#: otherwise (a summary study's ensemble backend: provenance, recorded per run), and in no rule's params.
PROVENANCE_KEYS = ("backend",)
#: Job.backend of a save: summary study's runs, whatever its ``backend`` key: the ensemble backend that computed a
#: run is provenance, not identity (runs by cuda and by numba are reused for each other); "auto", the key's default,
#: keeps the hashes of the stores written before the key took cuda
SUMMARY_JOB_BACKEND = "auto"


def number_config(cfg: dict) -> dict:
    """A study entry without its ``PRESENTATION_KEYS`` and ``PROVENANCE_KEYS``: what defines its errors and rates."""
    return {k: v for k, v in cfg.items() if k not in PRESENTATION_KEYS + PROVENANCE_KEYS}


def shown_config(cfg: dict) -> dict:
    """A study entry without its ``PROVENANCE_KEYS``: what defines its tables and figure."""
    return {k: v for k, v in cfg.items() if k not in PROVENANCE_KEYS}


# --------------------------------------------------------------------------- expansion
def check_limits(studies: dict[str, Study], limits: dict, results: str = "results") -> int:
    """Refuse (ConfigError naming the run, its size and the key to raise) a run above ``limits.max_steps``
    or ``limits.max_bytes``, or stores not yet written that together exceed the free space of the results
    folder. Returns the bytes the missing stores will take."""
    import shutil

    limits = {**defaults("limits"), **limits}
    missing = 0
    for name, study in studies.items():
        m, nu = study.dims
        summary = study.cfg.get("save") == "summary"  # one sharded store: a row of summary numbers per run
        if summary and not os.path.exists(shard_store(study.results, name)):
            missing += len(study.jobs) * 8 * (16 + 2 * nu + 2 * (1 + 2 * m))
        sizes: dict[tuple[int, int], int] = {}  # (steps, save_every) -> a run's store size: runs repeat them
        over = None  # the largest run above a limit (the first of the largest): the one named
        # a sweep's columns: per method and instance its longest run (the others store less)
        runs = study.jobs.longest() if isinstance(study.jobs, PlannedJobs) else study.jobs.values()
        for job in runs:
            size = sizes.get((job.steps, job.save_every))
            if size is None:
                size = sizes[job.steps, job.save_every] = job.stored_bytes(m, nu)
            if (job.steps > limits["max_steps"] or size > limits["max_bytes"]) and (
                over is None or job.steps > over[0].steps
            ):
                over = (job, size)
            if not summary and not os.path.exists(job.store):
                missing += size
        if over is not None:
            job, size = over
            key = "max_steps" if job.steps > limits["max_steps"] else "max_bytes"
            what = (
                f"studies.{name}: run {job.id} takes {job.steps:.3g} steps and stores {size / 1e9:.3g} GB "
                f"(about {_duration(job.estimated_seconds())} on one core)"
            )
            raise ConfigError(f"{what}: above limits.{key} = {limits[key]:.3g}; raise limits.{key} to run it")
    folder = os.path.abspath(results)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    free = shutil.disk_usage(folder).free
    if missing > free:
        raise ConfigError(
            f"results = {results!r}: the runs to compute store {missing / 1e9:.3g} GB, more than the "
            f"{free / 1e9:.3g} GB free in {folder}; free space, or give results a larger disk"
        )
    return missing


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def _largest_dims(problems) -> tuple[int, int]:
    """(m, nu) of the largest of ``problems`` (the instances built so far: a grid over a chain's size builds each;
    a planned grid, whose instances differ in values only, its first)."""
    return max(int(p.m) for p in problems), max(int(p.nu) for p in problems)


def expand_study(name: str, cfg: dict, results: str = "results") -> Study:
    """Check one study entry and expand it into methods, rows and jobs (see the module docstring).

    The steps: the entry with the schema's defaults and its kind checked (``_study_entry``), the
    problem built from the config (``build_problem``), the interval (``_interval``), the error
    convention (``_convention``), then per method entry the method (``_method``) and its runs: a Job and a Row
    each (``_add_runs``), or for a ``save: summary`` study the columns of ``runs.PlannedJobs`` and ``PlannedRows``
    (``_run_columns``: a sweep's 10^5 to 10^6 runs, no object per run).
    """
    where = f"studies.{name}"
    cfg = _study_entry(where, cfg)
    grid = _grid(where, cfg)
    with paused():  # 10^5 instances, their problems and arrays: objects that all stay
        instances, representatives, (reference, convention) = _instances(where, cfg, grid)
    problem, t_end = instances[0].problem, instances[0].t_end
    study = Study(
        name=name,
        study_kind=cfg["kind"],
        title=cfg.get("title") or name,
        problem=problem_name(cfg["problem"]),
        params=dict(cfg["params"]),
        t_end=t_end,
        period=problem.period,
        reference=reference,
        convention=convention,
        methods=[],
        jobs={},
        plot=cfg["plot"],
        expected_rates=dict(cfg.get("expected_rates") or {}),
        results=results,
        cfg=cfg,
        _problem=problem,
        dims=_largest_dims([problem, *(i.built for i in instances if i.built is not None)]),
        sizes_vary=len({int(i.built.m) for i in instances if i.built is not None}) > 1,
        grid=grid,
        instances=instances,
    )
    if not isinstance(cfg["methods"], list) or not cfg["methods"]:
        raise ConfigError(f"{where}.methods: expected a non-empty list of method entries")
    from hbvm_core.fingerprint import method_fingerprint, sources_snapshot

    # a summary study's runs as columns (``_run_columns``); the others a Job and a Row each (``_add_runs``); the
    # collector paused: 10^5 to 10^6 objects that all stay
    columnar = cfg.get("save") == "summary"
    groups: list[dict] = []
    with paused(), sources_snapshot():  # the instances share their modules: their files read once
        if columnar:  # identified first: a sharded store records no identity to snap to
            for inst in instances:
                if not inst.structure:  # planned as arrays: identified there (``grid_plan``)
                    _identify(study, inst, [])
        for i, raw in enumerate(cfg["methods"]):
            where_i = f"{where}.methods[{i}]"
            study_method = _method(where_i, raw, cfg, study.methods, representatives)
            numerics = method_fingerprint(study_method.entry)  # once per method: the instances share it
            rows: dict[str, list] = {key: [] for key in ROW_FIELDS}
            if columnar:
                groups += _method_columns(study, study_method, raw, where_i, instances, numerics, rows)
            else:
                for inst in instances:
                    _add_runs(study, study_method, raw, where_i, inst, numerics)
            if columnar:
                study_method.rows = PlannedRows(rows)
            study.methods.append(study_method)
        if columnar:
            study.jobs = PlannedJobs(groups, fill=functools.partial(_group_probe, study))
            return study
        by_combo: dict[str, list] = {}
        for job in study.jobs.values():
            by_combo.setdefault(job.combo, []).append(job)
        for inst in instances:
            _identify(study, inst, by_combo.get(inst.key, []))
    return study


def _instances(where: str, cfg: dict, grid: dict) -> tuple[list[Instance], list, tuple[str, Any]]:
    """(an Instance per combination of ``grid``, a problem per code of them, (reference, ErrorConvention)).

    Planned per code, not per value: each instance's problem is built with its checks deferred
    (``hbvm_core.problem.deferred_validation``); of the instances of one code (``fingerprint.code_key``: the same
    callbacks, differing only in values) the first is validated in full (shapes, derivatives, the convention's
    needs) and the initial data of all are checked at once (``inconsistent_instance``), naming the first bad one.
    """
    from hbvm_core.checks import derivative_checks
    from hbvm_core.fingerprint import code_key
    from hbvm_core.problem import deferred_validation, inconsistent_instance

    entry, check = cfg["problem"], cfg.get("check_derivatives", True)
    combinations = _combinations(grid)
    if grid and cfg.get("save") == "summary" and ARRAYS.get():  # a sweep's instances as arrays, where they can be
        steps = Steps(Instance, build_problem, _interval, _validate, _convention)
        planned = family_instances(where, cfg, grid, combinations, steps)
        if planned is not None:
            return planned
    instances: list[Instance] = []
    keys: set[str] = set()  # the combinations' names (a set: the parse stays linear in grid values)
    codes: dict[tuple, list[Instance]] = {}
    factory = None
    with deferred_validation(), derivative_checks(check):
        for values in combinations:
            params = {**cfg["params"], **values}
            what = f"{where}[{combo_name(values)}]" if values else where
            problem = build_problem(what, entry, params, check, factory)
            if factory is None:  # the first built resolved and checked the factory; the others call it
                factory = _instance_factory(entry)
            inst = Instance(combo_name(values), values, params, problem, "", _interval(what, cfg, problem),
                            problem.period, where=what)  # fmt: skip
            if inst.key in keys:
                raise ConfigError(
                    f"{where}.grid: two combinations get the same name {inst.key!r}; give distinct values"
                )
            keys.add(inst.key)
            instances.append(inst)
            codes.setdefault(code_key(problem), []).append(inst)
    for group in codes.values():
        first = group[0]
        _validate(first.where, entry, first.problem, check)
        bad = inconsistent_instance([inst.problem for inst in group])
        if bad is not None:
            i, why = bad
            raise ConfigError(f"{_problem_what(group[i].where, entry)}: {why}")
        conventions = _convention(first.where, cfg, first.problem)
    return instances, [group[0].problem for group in codes.values()], conventions


def _instance_factory(problem_entry):
    """The factory of ``problem_entry`` (a mapping of expressions: its model's ``problem``, the mapping read once)."""
    if isinstance(problem_entry, dict):
        from hbvm_core.formulas import model_from_mapping

        return model_from_mapping(problem_entry).problem
    from hbvm_core.problems import resolve_factory

    return resolve_factory(problem_entry)


def _validate(where: str, problem_entry, problem, check_derivatives: bool) -> None:
    """``problem.validate()`` (built with its checks deferred), its ProblemError one line as ``build_problem``'s."""
    from hbvm_core.checks import derivative_checks

    if not problem.check:
        return
    try:
        with derivative_checks(check_derivatives):
            problem.validate()
    except (ProblemError, NonFiniteError) as exc:
        raise ConfigError(f"{_problem_what(where, problem_entry)}: {exc}") from None


def _problem_what(where: str, problem_entry) -> str:
    """The study's problem entry as messages name it: ``studies.s[L=0.5].problem = 'conical_pendulum'``."""
    if isinstance(problem_entry, str):
        return f"{where}.problem = {problem_entry!r}"
    return f"{where}.problem {problem_entry.get('name')!r}"


def _identify(study: Study, inst: Instance, jobs: list) -> None:
    """The instance's problem identity, snapped to what the stores of its runs (``jobs``) record
    (``hbvm_core.fingerprint.problem_identity``), set on the instance and its jobs."""
    from hbvm_core.fingerprint import problem_fingerprint, problem_identity, problem_structure

    structure = problem_structure(inst.problem)
    if study.cfg.get("save") == "summary":  # a sharded store records no identity: problem_identity with no records
        inst.fingerprint, inst.structure = problem_fingerprint(inst.problem), structure
        inst.probe = None  # computed when first read (``_Probe``)
        return
    fingerprint, probe = problem_identity(inst.problem, _recorded(jobs), structure)
    inst.fingerprint, inst.structure = fingerprint, structure
    inst.probe = json.dumps(probe, sort_keys=True)
    inst._checked = (structure, probe)  # the problem agrees with it (problem_identity)
    for job in jobs:
        job.problem_fingerprint, job.problem_structure, job.problem_probe = fingerprint, inst.structure, inst.probe
        job._hash = None  # the fingerprint is hashed; the steps (h, t_end) stay


def _group_probe(study: Study, group: dict) -> str:
    """The probe of the instance of a group of ``PlannedJobs`` (planned without it: ``_run_columns``)."""
    return study.instance_of(group["fields"]["combo"]).probe


def _recorded(jobs):
    """The attrs (or failure markers) of the jobs' stores that exist, read lazily (the identity they record)."""

    for job in jobs:
        if os.path.exists(job.store):
            attrs = read_attrs(job.store)
            if attrs:
                yield attrs
        if os.path.exists(job.store + FAILED):
            fail = read_failure(job.store)
            if fail:
                yield fail


def _study_entry(where: str, cfg: dict) -> dict:
    """The study entry with the schema's defaults (``schema.defaults``) and its kind, plot and chunk checked."""
    study_kind = cfg.get("kind", "convergence")
    cfg = {**defaults("study"), "plot": KINDS[study_kind].plots[0] if study_kind in KINDS else "convergence", **cfg}
    if cfg["kind"] not in KINDS:
        raise ConfigError(f"{where}.kind = {cfg['kind']!r}: expected one of {', '.join(KINDS)}")
    cfg.setdefault("save", KINDS[cfg["kind"]].save)
    if cfg["save"] == "summary":
        if (cfg.get("errors") or {}).get("lambda_sample") is not None:  # the tables' caption would name it
            raise ConfigError(
                f"{where}.errors.lambda_sample: save: summary keeps the multiplier of the last step only, so there "
                "is no e_lambda to sample; remove the key, or give save: trajectory"
            )
        if cfg["backend"] == "numpy":
            raise ConfigError(f"{where}.save = 'summary' runs the compiled ensemble loop; backend numpy cannot")
    elif cfg["backend"] == "cuda":
        raise ConfigError(
            f"{where}.backend = 'cuda': the per-run loops of save: {cfg['save']} have no GPU path; "
            "give save: summary (the ensemble), or backend auto or numba"
        )
    plots = KINDS[cfg["kind"]].plots
    if cfg["plot"] not in plots:
        raise ConfigError(f"{where}.plot = {cfg['plot']!r}: expected one of {', '.join(plots)}")
    for key in ("problem", "methods", "errors"):
        if key not in cfg:
            raise ConfigError(f"{where}: missing key {key!r}")
    chunk = cfg["chunk"]
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= MAX_CHUNK:
        raise ConfigError(f"{where}.chunk = {chunk!r}: expected an integer from 1 to {MAX_CHUNK} (rows per chunk)")
    return cfg


def _name(cfg: dict) -> str:
    """The study's problem as named in messages (a mapping of expressions by its ``name``)."""

    return problem_name(cfg["problem"])


def _interval(where: str, cfg: dict, problem) -> float:
    """t_end of the study: ``t_end``, or ``periods`` times the problem's period."""
    if ("t_end" in cfg) == ("periods" in cfg):
        raise ConfigError(f"{where}: give exactly one of t_end or periods")
    if "periods" in cfg:
        if problem.period is None:
            raise ConfigError(
                f"{where}.periods: problem {_name(cfg)!r} has no period; give t_end (or period= in the problem)"
            )
        t_end = float(cfg["periods"]) * problem.period
    else:
        t_end = float(cfg["t_end"])
    _positive(f"{where}.{'periods' if 'periods' in cfg else 't_end'}", t_end)
    return t_end


def _convention(where: str, cfg: dict, problem) -> tuple[str, Any]:
    """(reference, ErrorConvention) of ``errors``; the problem must have what the convention needs."""
    from hbvm_core.metrics import ErrorConvention

    errs = dict(cfg["errors"])
    reference = errs.get("reference")
    if reference not in REFERENCES:
        raise ConfigError(f"{where}.errors.reference = {reference!r}: expected one of {', '.join(REFERENCES)}")
    try:
        convention = ErrorConvention.from_config(dict(errs, reference="self") if reference == "none" else errs)
        if reference != "none":
            convention.check_problem(problem, _name(cfg))
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    return reference, convention


def _method(where: str, raw, cfg: dict, earlier: list[StudyMethod], problems=()) -> StudyMethod:
    """The StudyMethod of one method entry: its canonical (hashed) entry, its label and display name; ConfigError
    when one of ``problems`` lacks what the method needs (``Method.check_problem``)."""
    from hbvm_core.methods import method_from_entry

    if not isinstance(raw, dict):
        raise ConfigError(f"{where} = {raw!r}: expected a mapping such as {{k: 2, s: 2}}")
    # the canonical entry (hashed): method named, study-level solver filled in for HBVM
    entry = {"method": "hbvm"} | {k: v for k, v in raw.items() if k not in METHOD_META_KEYS}
    if entry["method"] == "hbvm":
        entry.setdefault("solver", cfg["solver"])
        k, s = entry.get("k"), entry.get("s")
        if isinstance(k, int) and isinstance(s, int) and k < s:
            raise ConfigError(f"{where}: k = {k} < s = {s}; HBVM(k, s) needs k >= s")
    try:
        method = method_from_entry(entry)
        for problem in problems:
            method.check_problem(problem)
    except (ConfigError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    label = raw.get("label") or method_label(entry)
    if any(m.label == label for m in earlier):
        raise ConfigError(f"{where}: duplicate method {label!r} in the study (give a distinct label)")
    module = type(method).__module__
    return StudyMethod(label, method.name, entry, entry.get("k"), entry.get("s"), method=method,
                      module="" if module.startswith("hbvm_core.") else module)  # fmt: skip


def _grid(where: str, cfg: dict) -> dict:
    """The study's ``grid`` (key -> list of values, a range expanded: ``grids.grid_values``), checked: keys are
    keywords of the factory not in ``params``."""
    import inspect

    from hbvm_core.problems import resolve_factory

    grid = dict(cfg.get("grid") or {})
    need = KINDS[cfg["kind"]].grid_keys
    if need is not None and len(grid) != need:
        keys = "one key" if need == 1 else f"{need} keys"
        raise ConfigError(f"{where}: kind {cfg['kind']} needs a grid of exactly {keys}, got {len(grid)}")
    if not grid:
        return {}
    if not KINDS[cfg["kind"]].grid:
        with_grid = " and ".join(name for name, kind_def in KINDS.items() if kind_def.grid)
        raise ConfigError(f"{where}.grid: a grid is for {with_grid} studies, not kind {cfg['kind']}")
    try:
        factory = resolve_factory(cfg["problem"])
        signature = inspect.signature(factory)
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    except Exception:  # an import error or no signature: building the problem tells
        signature = None
    reserved = {*COLUMNS, *EXTRA, *TIMINGS, *MEASURED, "combo", "scheme", "constraint"}
    for key, values in grid.items():
        if key in reserved:
            raise ConfigError(
                f"{where}.grid.{key}: the name of a column of errors.csv or timings.csv, or of a dimension of "
                "errors.zarr; a grid key cannot be one"
            )
        if key in cfg["params"]:
            raise ConfigError(f"{where}.grid.{key}: also given in params; give it in one of them")
        if signature is not None:
            ps = signature.parameters
            takes = key in ps or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ps.values())
            if not takes:
                raise ConfigError(
                    f"{where}.grid.{key}: not a keyword of problem {_name(cfg)!r} "
                    f"(its keywords: {', '.join(ps) or 'none'})"
                )
        grid[key] = grid_values(f"{where}.grid.{key}", values)  # a list, or a range's values (grids.py)
    return grid


def _combinations(grid: dict) -> list[dict]:
    """The Cartesian product of the grid's values, as dicts in the grid's key order (the last key fastest);
    [{}] without a grid."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


@functools.lru_cache(maxsize=2**16)
def _steps_of(h: float, t_end: float) -> int:
    """``hbvm_core.integrate.number_of_steps``, once per (h, t_end): a grid's instances repeat their step sizes."""
    from hbvm_core.integrate import number_of_steps

    return number_of_steps(h, t_end)


@functools.lru_cache(maxsize=2**16)
def _run_name(h: float, n: int | None) -> str:
    """``layout.run_stem``, once per (h, n)."""
    return run_stem(h, n)


def _fixed_fields(study: Study, study_method: StudyMethod, inst: Instance, numerics: str) -> dict:
    """The fields of every run of one method and instance (a sweep plans 10^6 of them: shared objects, set once);
    ``numerics``: the method's ``method_fingerprint``."""
    cfg = study.cfg
    return dict(
        study=study.name,
        label=study_method.label,
        name=study_method.name,
        problem=cfg["problem"],
        params=inst.params,
        method=study_method.entry,
        t_end=inst.t_end,
        save_every=int(cfg["save_every"]),
        compensated=bool(cfg["compensated"]),
        backend=SUMMARY_JOB_BACKEND if cfg.get("save") == "summary" else cfg["backend"],
        chunk=int(cfg["chunk"]),
        numerics_fingerprint=numerics,
        combo=inst.key,
        method_module=study_method.module,
    )


def _step_runs(study: Study, raw: dict, where: str, inst: Instance) -> Iterator[tuple]:
    """The rows of one method (its own step-size rule or the study's) for one problem instance, checked: per row
    (n, h, runs), ``runs`` the row's run and, for ``errors.reference: self``, its h/2 partner (of the same
    instance), each (h, n, role, steps, run name: ``layout.run_stem``). ConfigError for a step that does not
    divide the interval, two runs of one name, or sample times off the saved grid."""
    cfg = study.cfg
    study_rule = {k: cfg[k] for k in STEP_KEYS if k in cfg}
    rule = {k: raw[k] for k in STEP_KEYS if k in raw} or study_rule
    names: dict[str, float] = {}  # run name -> h: names must identify the runs
    self_reference = study.reference == "self"
    for n, h, half in step_sizes(rule, inst.period, where if rule is not study_rule else f"studies.{study.name}"):
        half_n = None if n is None else (n + 1 if "halvings" in rule else 2 * n)
        runs = []
        for hh, nn, role in ((h, n, "row"), (half, half_n, "partner")) if self_reference else ((h, n, "row"),):
            try:
                steps = _steps_of(hh, inst.t_end)
            except ConfigError as exc:
                extra = " (the h/2 run of errors.reference: self)" if role == "partner" else ""
                raise ConfigError(f"{where}: {exc}{extra}") from None
            run = _run_name(hh, nn)
            if names.setdefault(run, hh) != hh:
                raise ConfigError(
                    f"{where}: step sizes {names[run]!r} and {hh!r} get the same run name {run!r}; "
                    "give step sizes that differ in their first 12 digits"
                )
            runs.append((hh, nn, role, steps, run))
        _check_sampling(where, study.convention, study.reference, h, int(cfg["save_every"]), inst.period)
        yield n, h, runs


def _add_runs(study: Study, study_method: StudyMethod, raw: dict, where: str, inst: Instance, numerics: str) -> None:
    """The rows of one method and instance (``_step_runs``) and their jobs, each named and stored where
    ``layout.store_path`` says (a summary study's runs live in its one sharded store)."""
    summary = study.cfg.get("save") == "summary"
    fixed = _fixed_fields(study, study_method, inst, numerics)
    prefix = f"{study_method.label}/{inst.key}/" if inst.key else f"{study_method.label}/"  # Job.id
    for n, h, runs in _step_runs(study, raw, where, inst):
        row = Row(label=study_method.label, n=n, h=h, job="", combo=inst.key)
        for hh, nn, role, steps, run in runs:
            job = Job(h=hh, **fixed)
            job.run, job._steps = run, steps
            if not summary:
                job.store = store_path(study.results, study.name, study_method.label, hh, nn, inst.key)
            job_id = prefix + run
            study.jobs.setdefault(job_id, job)
            if role == "row":
                row.job = job_id
            else:
                row.partner = job_id
        study_method.rows.append(row)


def _run_columns(
    study: Study, study_method: StudyMethod, raw: dict, where: str, inst: Instance, numerics: str, rows: dict
) -> dict:
    """The runs of one method and instance of a summary study as columns: the group of ``PlannedJobs`` (the
    fields once, per run its h, name and hash; the instance identified already), its rows appended to the
    method's ``rows`` (``ROW_FIELDS`` columns). The same runs, names and hashes as ``_add_runs``, with no object per
    run: a sweep plans 10^5 to 10^6 of them. The rows' runs come first, in row order; then, for ``errors.reference:
    self``, the h/2 partners that are no row's run (with halvings: the last row's)."""
    fixed = _fixed_fields(study, study_method, inst, numerics)
    probe = None if inst.probe_pending else inst.probe  # None: filled when the group is first read (PlannedJobs)
    identity = dict(problem_fingerprint=inst.fingerprint, problem_structure=inst.structure, problem_probe=probe)
    proto = Job(h=0.0, **fixed, **identity)  # every field of the group's runs but h, run and store
    prefix = f"{study_method.label}/{inst.key}/" if inst.key else f"{study_method.label}/"  # Job.id
    ns, row_hs, hs, names, partner_names, _ = _runs_plan(study, raw, where, inst)
    count = len(row_hs)
    partners = [None if p is None else prefix + p for p in partner_names]
    for key, column in zip(
        ROW_FIELDS,
        (
            [study_method.label] * count,
            ns,
            row_hs,
            [prefix + run for run in names[:count]],
            partners,
            [inst.key] * count,
        ),
    ):
        rows[key] += column
    fields = {f: getattr(proto, f) for f in JOB_FIELDS if f not in RUN_FIELDS}
    runs = len(hs)
    return {"fields": fields, "runs": {"h": hs, "run": names, "store": [""] * runs, "hash": hashes_at(proto, hs)}}


def _method_columns(
    study: Study, study_method: StudyMethod, raw: dict, where: str, instances: list, numerics: str, rows: dict
) -> list[dict]:
    """``_run_columns`` of every instance of a summary study for one method: the runs planned once per interval and
    period (``_runs_plan``: a grid's instances repeat them), each run's hash written from one template of the hash
    input (``templates.Template``: the instances differ in their params, fingerprint and interval, the runs in h);
    instance by instance (``_run_columns``) where a value is not a number such a template takes."""

    keys = list(study.grid)
    marks = ("\x00fingerprint\x00", *(f"\x00{k}\x00" for k in keys), "\x00t_end\x00", "\x00h\x00")
    proto = Job(h=0.0, **_fixed_fields(study, study_method, instances[0], numerics))
    proto.params = {**instances[0].params, **dict(zip(keys, marks[1:-2]))}
    proto.h, proto.t_end, proto.problem_fingerprint = marks[-1], marks[-2], marks[0]
    template = Template.of(proto.hash_input(), marks)  # None: a mark that the hash input holds twice or not at all
    plans: dict[tuple, tuple] = {}  # (t_end, period) -> the runs of an instance with them (``_runs_plan``)
    rule = {k: raw[k] for k in STEP_KEYS if k in raw} or {k: study.cfg[k] for k in STEP_KEYS if k in study.cfg}
    conv = study.convention
    by_period = "period_divisions" in rule or "periods" in (conv.sample, conv.lambda_sample)  # else the same runs
    groups, base = [], None
    sha256 = hashlib.sha256
    label = study_method.label
    # the instances are the grid's combinations in order (``_combinations``): their values' JSON, each written once
    values_texts = itertools.product(*(json_texts(study.grid[k]) for k in keys))
    t_end, t_text = None, None
    for inst, texts in zip(instances, values_texts):
        if inst.t_end is not t_end:  # a grid's instances share theirs (the config's t_end) or have one each
            t_end, t_text = inst.t_end, json_scalar(inst.t_end)
        at = (inst.t_end, inst.period if by_period else None)
        plan = plans.get(at)
        if plan is None:
            plan = plans[at] = _runs_plan(study, raw, where, inst)
        ns, row_hs, hs, names, partner_names, h_texts = plan
        if template is None or t_text is None or None in texts or None in h_texts:  # as _run_columns does
            groups.append(_run_columns(study, study_method, raw, where, inst, numerics, rows))
            continue
        probe = None if inst.probe_pending else inst.probe
        if base is None:
            identity = dict(problem_fingerprint="", problem_structure="", problem_probe=None)
            first = Job(h=0.0, **_fixed_fields(study, study_method, inst, numerics), **identity)
            base = {f: getattr(first, f) for f in JOB_FIELDS if f not in RUN_FIELDS}
        identity = dict(problem_fingerprint=inst.fingerprint, problem_structure=inst.structure, problem_probe=probe)
        fields = dict(base, params=inst.params, t_end=inst.t_end, combo=inst.key, **identity)
        fingerprint = inst.fingerprint  # hex digits: its JSON is itself in quotes
        head = (f'"{fingerprint}"' if fingerprint.isalnum() else json.dumps(fingerprint), *texts, t_text)
        hashes = [sha256(template.fill(*head, h).encode()).hexdigest()[:16] for h in h_texts]
        prefix = f"{label}/{inst.key}/" if inst.key else f"{label}/"  # Job.id
        count = len(ns)
        for key, column in zip(
            ROW_FIELDS,
            ([label] * count, ns, row_hs, [prefix + run for run in names[:count]],
             [None if p is None else prefix + p for p in partner_names], [inst.key] * count),
        ):  # fmt: skip
            rows[key] += column
        groups.append({"fields": fields, "runs": {"h": hs, "run": names, "store": [""] * len(hs), "hash": hashes}})
    return groups


def _runs_plan(study: Study, raw: dict, where: str, inst: Instance) -> tuple:
    """The runs of one method for an instance (its interval and period), as ``_run_columns`` plans them: (the rows'
    n, the rows' h, every run's h, every run's name (the rows' runs first, in row order, then the h/2 partners that
    are no row's run), each row's partner's name or None, every run's h as JSON)."""

    ns, row_hs, hs, names, partners = [], [], [], [], []
    halves: dict[str, float] = {}
    for n, h, runs in _step_runs(study, raw, where, inst):
        (hh, _, _, _, run), *partner = runs
        ns.append(n)
        row_hs.append(h)
        hs.append(hh)
        names.append(run)
        for half, _, _, _, name in partner:
            halves.setdefault(name, half)
        partners.append(partner[0][4] if partner else None)
    rows_runs = set(names)
    for name, half in halves.items():
        if name not in rows_runs:
            names.append(name)
            hs.append(half)
    return ns, row_hs, hs, names, partners, [json_scalar(h) for h in hs]


def build_problem(where: str, problem_entry: str, params: dict, check_derivatives: bool = True, factory=None):
    """The study's problem from ``problem_entry`` (the config's ``problem``) and ``params``; ConfigError with one
    line naming the study, the problem entry and the exception when the module fails to import, the params do
    not fit the factory's signature (bad params), or the factory raises (its own error, reported as such,
    whatever its type).
    ``check_derivatives``: the study's key; False skips ``hbvm_core.checks.check_derivatives``. ``factory``: the
    entry's factory, resolved and its signature checked with these params' keys already (a grid's instances)."""
    import inspect

    from hbvm_core import Problem
    from hbvm_core.checks import derivative_checks
    from hbvm_core.problems import resolve_factory

    what, given = _problem_what(where, problem_entry), factory
    if factory is None:
        try:
            factory = resolve_factory(problem_entry)
        except ConfigError as exc:
            raise ConfigError(f"{where}.{exc}") from None
        except Exception as exc:  # the module raised while importing (SyntaxError, NameError, ...)
            raise ConfigError(
                f"{what}: importing {problem_entry.partition(':')[0]!r} raised {type(exc).__name__}: {exc}"
            ) from None
        try:
            inspect.signature(factory).bind(**params)
        except TypeError as exc:  # the factory's call signature does not take these params
            raise ConfigError(f"{where}.params = {params!r}: {exc}") from None
        except ValueError:  # no signature to check (a builtin): the call tells
            pass
    try:
        # a given factory: a grid's instance, built inside _instances' derivative_checks (one block for them all)
        with derivative_checks(check_derivatives) if given is None else contextlib.nullcontext():
            problem = factory(**params)
    except (ProblemError, NonFiniteError) as exc:  # a user problem that cannot be integrated
        raise ConfigError(f"{what}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc}" if str(exc).startswith("problem") else f"{what}: {exc}") from None
    except Exception as exc:
        raise ConfigError(f"{what}: the factory raised {type(exc).__name__}: {exc}") from None
    if not isinstance(problem, Problem):
        raise ConfigError(f"{what}: factory returned {type(problem).__name__}, expected a Problem")
    return problem


def step_sizes(rule: dict, period: float | None, where: str) -> list[tuple[int | None, float, float]]:
    """[(n, h, h/2), ...] in decreasing h from one step-size rule (see the module docstring)."""
    keys = set(rule)
    if not keys:
        raise ConfigError(f"{where}: no step sizes; give h, h0 with halvings, or period_divisions")
    if keys == {"h"}:
        hs = [float(h) for h in rule["h"]]
        for h in hs:
            _positive(f"{where}.h", h)
        if len(set(hs)) != len(hs):
            raise ConfigError(f"{where}.h = {rule['h']!r}: repeated step size")
        return [(None, h, h / 2) for h in sorted(hs, reverse=True)]
    if keys == {"h0", "halvings"}:
        h0, m = float(rule["h0"]), rule["halvings"]
        _positive(f"{where}.h0", h0)
        if not (isinstance(m, int) and not isinstance(m, bool) and m >= 0):
            raise ConfigError(f"{where}.halvings = {m!r}: expected an integer >= 0")
        return [(n, h0 * 2.0**-n, h0 * 2.0 ** -(n + 1)) for n in range(m + 1)]
    if keys == {"period_divisions"}:
        if period is None:
            raise ConfigError(f"{where}.period_divisions: the problem has no period (no period=)")
        ns = _divisions(rule["period_divisions"], f"{where}.period_divisions")
        return [(n, period / n, period / (2 * n)) for n in ns]
    raise ConfigError(
        f"{where}: step-size keys {sorted(keys)}: give exactly one rule: h, h0 with halvings, or period_divisions"
    )


def _divisions(value, where: str) -> list[int]:
    if isinstance(value, dict):
        unknown = set(value) - {"start", "step", "stop"}
        if unknown:
            raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (expected start, step, stop)")
        start, step, stop = value.get("start"), value.get("step", 1), value.get("stop")
        for key, v in (("start", start), ("step", step), ("stop", stop)):
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ConfigError(f"{where}.{key} = {v!r}: expected an integer >= 1")
        if stop < start:
            raise ConfigError(f"{where}: stop = {stop} < start = {start}")
        ns = list(range(start, stop + 1, step))
    else:
        ns = list(value)
        for v in ns:
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ConfigError(f"{where} = {value!r}: expected integers >= 1")
    if len(set(ns)) != len(ns):
        raise ConfigError(f"{where} = {value!r}: repeated division")
    return sorted(ns)


def _positive(where: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{where} = {value!r}: expected a finite number > 0")


def _check_sampling(where: str, convention, reference: str, h: float, save_every: int, period) -> None:
    """Sample times must lie on the saved grid of the run of step ``h`` (and of its h/2 partner)."""
    if reference == "none":
        return
    spacing = h * save_every
    off = _off_grid(spacing, period, convention.sample, convention.lambda_sample)
    if off is not None:
        key, val = off
        raise ConfigError(
            f"{where}: errors.{key} = {val!r} is not a multiple of h * save_every = {spacing!r} "
            f"(h = {h!r}); the sample times would not be saved"
        )


@functools.lru_cache(maxsize=2**16)
def _off_grid(spacing: float, period, sample, lambda_sample) -> tuple | None:
    """The first (key, value) of the convention's sample and lambda_sample whose times are not multiples of the
    saved points' ``spacing``, or None; once per spacing (a grid's instances repeat their step sizes)."""
    for key, val in (("sample", sample), ("lambda_sample", lambda_sample)):
        if val is None or val == "all":
            continue  # every saved point (the h run's are a subset of its h/2 partner's)
        d = period if val == "periods" else float(val)
        ratio = d / spacing
        if abs(ratio - round(ratio)) > 1e-6 * max(1.0, ratio) or round(ratio) < 1:
            return key, val
    return None
