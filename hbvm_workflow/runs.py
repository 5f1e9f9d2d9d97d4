"""A study's runs: ``Job`` (one trajectory, its identity hash and cost), ``Row`` (one table row), and the columnar
form of many of them (``PlannedJobs``, ``PlannedRows``: per method and instance the fields once, per run only its h,
name and hash), which the plan file holds and a sharded sweep's expansion builds directly.

A run's hash is the first 16 hex digits of the sha256 of ``hash_input`` as sorted JSON (``_hash_text``, written
from one template per method and instance: the runs of a sweep differ only in h).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hbvm_core.problems import BUILTIN, NUMPY_BEADS, problem_name

from .layout import run_stem
from .storage import saved_rows

# --------------------------------------------------------------------------- jobs and rows
#: Job.estimated_seconds: per run (the store); per step, each method's cost model (``Method.STEP_SECONDS``)
RUN_OVERHEAD_S = 0.003
#: workers_for: the least work (s) that pays for a second worker process of a study's solve job
WORK_PER_WORKER_S = 5.0


#: the Job fields that ``hash_input`` reads: setting one forgets the cached hash
HASHED = frozenset(
    ("problem_fingerprint", "numerics_fingerprint", "problem", "params", "method", "h", "t_end", "save_every",
     "compensated", "backend")
)  # fmt: skip


@dataclass(slots=True)
class Job:
    """One trajectory: a problem, a method entry and a step size on [0, t_end].

    Slotted, its hash and steps computed once (a sweep plans 10^5 to 10^6 of them)."""

    study: str
    label: str
    name: str
    #: the problem as the config gives it: a name, 'module:factory', or a mapping of expressions
    problem: str | dict
    params: dict
    method: dict
    h: float
    t_end: float
    save_every: int
    compensated: bool
    backend: str
    chunk: int
    store: str = ""
    run: str = ""
    #: hbvm_core.fingerprint of the problem as built and of the method's numerics (part of the hash)
    problem_fingerprint: str = ""
    numerics_fingerprint: str = ""
    #: what the worker checks its problem against (not part of the hash, which has the fingerprint): the
    #: problem's structure and its reference values (``problem_probe``, as JSON text shared by the runs)
    problem_structure: str = ""
    problem_probe: str = ""
    #: what the solve step shares with the workers (checked by them, not part of the hash): the study's folder
    #: and the file of a ``module:factory`` problem's module where the solve step found it
    study_dir: str = ""
    module_file: str = ""
    #: the grid combination of the run (``layout.combo_name``: ``L=0.5``); "" in a study without a grid
    combo: str = ""
    #: the module that registers the method, when outside hbvm_core (config ``method_modules``): a worker
    #: imports it before building the method
    method_module: str = ""
    #: the hash and the steps, once computed (not fields of the plan: ``as_dict`` leaves them out; not init
    #: fields: ``dataclasses.replace`` computes them again). The expansion sets every ``HASHED`` field before
    #: asking for them; whoever changes one after must call ``forget``.
    _hash: str | None = field(default=None, init=False, repr=False, compare=False)
    _steps: int | None = field(default=None, init=False, repr=False, compare=False)

    def forget(self) -> None:
        """Drop the cached hash and steps (after a change of a ``HASHED`` field)."""
        self._hash = self._steps = None

    @property
    def id(self) -> str:
        """Stable id: method label, grid combination (if any) and run name (``layout.run_stem``: n=24, h=0.1)."""
        combo = f"{self.combo}/" if self.combo else ""
        return f"{self.label}/{combo}{self.run or run_stem(self.h)}"

    @property
    def steps(self) -> int:
        """The run's number of steps (``hbvm_core.integrate.number_of_steps``, checked when the run was planned)."""
        if self._steps is None:
            from hbvm_core.integrate import number_of_steps

            self._steps = number_of_steps(self.h, self.t_end)
        return self._steps

    def hash_input(self) -> dict:
        """Everything that determines the trajectory (what ``hash`` hashes): the config's entries, what the
        problem computes and the identity of the numerics (``hbvm_core.fingerprint``). A problem of expressions
        counts by its name and fingerprint (its canonical expressions), not by the text of its mapping."""
        return {
            "problem_fingerprint": self.problem_fingerprint,
            "numerics_fingerprint": self.numerics_fingerprint,
            "problem": problem_name(self.problem),
            "params": self.params,
            "method": self.method,
            "h": self.h,
            "t_end": self.t_end,
            "save_every": self.save_every,
            "compensated": self.compensated,
            "backend": self.backend,
        }

    @property
    def hash(self) -> str:
        """The first 16 hex digits of the sha256 of ``hash_input`` as sorted JSON (``_hash_text``)."""
        if self._hash is None:
            self._hash = run_hash(_hash_text(self))
        return self._hash

    def as_dict(self) -> dict:
        """The fields (the values themselves, not copies: JSON and Job(**d) take them as they are)."""
        return {f: getattr(self, f) for f in JOB_FIELDS}

    def stored_bytes(self, m: int, nu: int) -> int:
        """The size of the run's store, uncompressed: per saved point t, q, p, H, g, hc (storage.ZarrSink.SPEC),
        per saved step tstep, lam (8 bytes each) and iterations (4 bytes)."""

        points, steps = saved_rows(self.steps, self.save_every)
        return points * 8 * (2 + 2 * m + 2 * nu) + steps * (8 + 8 * nu + 4)

    def estimated_seconds(self) -> float:
        """A rough wall time of the run on one core, for sizing a solve job (``workers_for``): ``work_seconds`` of
        this one run."""
        return _group_seconds(self, 1, self.steps)

    def step_rate(self) -> tuple[int, float]:
        """(the method's work units per step, ``Method.work_units``: HBVM's quadrature nodes; the seconds per unit
        of its cost model, ``Method.STEP_SECONDS``: compiled for a built-in problem unless ``backend: numpy``)."""
        return step_rate(self.method, self.problem, self.backend, self.params)


#: beads of a problem without compiled callbacks (``NUMPY_BEADS``: a chain) whose step costs about the method's
#: numpy rate; past them the cost grows in proportion (the sparse path: HBVM(2,2) about 2.4 ms a step at 200
#: links, RATTLE 0.5 ms; docs/performance.md)
BEADS_PER_NUMPY_STEP = 20


def step_rate(method: dict, problem: str | dict, backend: str, params: dict | None = None) -> tuple[int, float]:
    """``Job.step_rate`` of a job of this method entry, problem entry, backend and params."""
    _, units, (compiled_s, numpy_s) = _method_cost(method)
    if isinstance(problem, str) and problem in NUMPY_BEADS:  # no compiled loop: numpy, by its size
        beads = NUMPY_BEADS[problem](params or {})
        return units, numpy_s * max(1.0, beads / BEADS_PER_NUMPY_STEP)
    # expressions: compiled kernels too; the indexed form (hbvm_core.indexed) has none, its steps run in numpy
    ours = not isinstance(problem.get("coordinates"), dict) if isinstance(problem, dict) else problem in BUILTIN
    compiled = compiled_s is not None and backend != "numpy" and ours
    return units, compiled_s if compiled else numpy_s


def run_hash(text: str) -> str:
    """A run's hash: the first 16 hex digits of the sha256 of its hash text (``_hash_text``)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: a stand-in for h in ``_hash_text``'s template (the runs of a method and instance differ only in h)
_H_MARK = "\x00h of the run\x00"
#: the Job fields that ``hash_input`` reads, but h
_HASHED_BUT_H = operator.attrgetter(*sorted(HASHED - {"h"}))
#: the last template of ``_hash_text``: (the ids of the hash input's values but h, the text around h, the values),
#: replaced as one tuple (a thread reads it once: a worker may hash in several threads)
_TEMPLATE: tuple = (None, None, None)


def _hash_parts(job: Job) -> list[str] | None:
    """The text of ``_hash_text`` around h, [before, after], for the job's method and instance (the template
    is kept for the next job with the same entries); None where h's JSON does not fit one place of it."""
    global _TEMPLATE
    values = _HASHED_BUT_H(job)
    key = tuple(map(id, values))  # by identity (1 == 1.0 == True, with other JSON): the runs share their entries
    hit = _TEMPLATE
    if hit[0] != key:
        given = job.hash_input()
        given.pop("h")
        template = json.dumps({**given, "h": _H_MARK}, sort_keys=True)
        mark = json.dumps(_H_MARK)
        # the objects kept with their ids, so that no id is reused while it is the key
        hit = _TEMPLATE = (key, template.split(mark) if template.count(mark) == 1 else None, values)
    return hit[1]


def _hash_text(job: Job, parts: list[str] | None = None, h: float | None = None) -> str:
    """``json.dumps(job.hash_input(), sort_keys=True)``, the same text, written once per method and instance as a
    template with h left out and h's JSON put in (a finite float's or an int's JSON is its repr): a sweep hashes
    10^5 to 10^6 runs that differ only in h. The whole dump where the template would not be the text's own.
    ``parts``: the job's ``_hash_parts``, where the caller has them; ``h``: the text of the run of the job's method
    and instance at that step size instead of the job's own (the columnar expansion: one job stands for them all)."""
    parts, h = parts or _hash_parts(job), job.h if h is None else h
    if parts is None or type(h) not in (float, int) or not math.isfinite(h):
        return json.dumps(job.hash_input() | {"h": h}, sort_keys=True)
    return repr(h).join(parts)


def hashes_at(job: Job, hs: list[float]) -> list[str]:
    """The hashes of the runs of ``job``'s method and instance at the step sizes ``hs`` (``run_hash`` of
    ``_hash_text`` at each h), the template written once."""
    parts = _hash_parts(job)
    if parts is None or not all(type(h) in (float, int) and math.isfinite(h) for h in hs):
        return [run_hash(_hash_text(job, parts, h)) for h in hs]
    sha256 = hashlib.sha256
    return [sha256(repr(h).join(parts).encode()).hexdigest()[:16] for h in hs]


#: the fields of a Job as the plan and a worker's task carry them
JOB_FIELDS = tuple(f for f in Job.__dataclass_fields__ if not f.startswith("_"))
#: id of a method entry -> (the entry, its work units per step, its method's STEP_SECONDS)
_COST: dict = {}


def _method_cost(entry: dict) -> tuple:
    """(entry, work units per step, STEP_SECONDS) of a method entry, looked up once per entry object (the runs of
    a method share theirs)."""
    hit = _COST.get(id(entry))
    if hit is None or hit[0] is not entry:
        from hbvm_core.methods import Method, method_class

        cls = method_class(entry)
        hit = (entry, cls.work_units(entry) if cls is not None else 1, (cls or Method).STEP_SECONDS)
        _COST[id(entry)] = hit
    return hit


#: what ``Job.step_rate`` reads of a job: the runs of a method and instance share these objects
_RATE_KEY = operator.attrgetter("method", "problem", "backend", "params")


def work_seconds(jobs) -> float:
    """The summed ``Job.estimated_seconds`` of ``jobs`` (Jobs, a study's mapping of them, or a ``PlannedJobs``: per
    group), the rate looked up once per run of consecutive jobs that share their method, problem and backend (a
    sweep's 10^6 jobs are a few thousand such runs)."""
    if isinstance(jobs, PlannedJobs):
        return jobs.work_seconds()
    total = 0.0
    for _, group in itertools.groupby(jobs.values() if isinstance(jobs, Mapping) else jobs, key=_RATE_KEY):
        group = list(group)
        total += _group_seconds(group[0], len(group), sum(j.steps for j in group))
    return total


def _group_seconds(job: Job, runs: int, steps: int) -> float:
    """The estimated seconds of ``runs`` runs of ``job``'s method, problem and backend, of ``steps`` steps in all:
    a run's overhead each, and the steps at the method's rate (``Job.step_rate``)."""
    units, seconds = job.step_rate()
    return runs * RUN_OVERHEAD_S + steps * units * seconds


def workers_for(runs: int, work: float, cores: int, share: float = 1.0) -> int:
    """Worker processes for a solve job of ``runs`` runs of ``work`` estimated seconds given ``cores``.

    ``share``: the study's part of the estimated work of every study in the run. A
    study gets at least one worker, and one more for each WORK_PER_WORKER_S of its
    estimated work, up to its share of the cores and its number of runs: a study of
    seconds of work takes one core and leaves the others to the other studies' jobs
    (each job pays a Python start-up and a cluster), while a long one takes them all.
    """
    if not runs:
        return 1
    by_work = math.ceil(work / WORK_PER_WORKER_S)
    by_share = math.ceil(max(1, int(cores)) * min(1.0, max(0.0, share)))
    return max(1, min(runs, by_work, by_share))


@dataclass(slots=True)
class Row:
    """One table row: a method at one step size; ``partner`` is the h/2 job id for reference: self."""

    label: str
    n: int | None
    h: float
    job: str
    partner: str | None = None
    #: the grid combination (``Instance.key``); "" in a study without a grid
    combo: str = ""


#: a character that JSON writes escaped (json.dumps with ensure_ascii: also every non-ASCII one)
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')


def _pairs_json(ids: list[str], hashes: list[str]) -> str:
    """``json.dumps([[id, hash], ...])``, the same text, joined directly where no id or hash needs escaping (a sweep's
    10^6 ids: a fifth of the time); the dump itself otherwise."""
    joined = "".join(ids) + "".join(hashes)
    if not joined.isascii() or _JSON_ESCAPED.search(joined):
        return json.dumps([list(pair) for pair in zip(ids, hashes)])
    return "[" + ", ".join(map('["{}", "{}"]'.format, ids, hashes)) + "]"


# --------------------------------------------------------------------------- many runs as columns
#: what a plan records of a row, and the fields of a job that differ between the runs of one method and instance
ROW_FIELDS = ("label", "n", "h", "job", "partner", "combo")
RUN_FIELDS = ("h", "run", "store")


class _BuiltOnDemand:
    """Columns that are built into objects (``_build``) only when first looked at by key or in order."""

    _built = None

    def _all(self):
        if self._built is None:
            self._built = self._build()
        return self._built

    def __getitem__(self, key):
        return self._all()[key]

    def __iter__(self):
        return iter(self._all())


class PlannedJobs(_BuiltOnDemand, Mapping):
    """A study's jobs as the plan holds them (``job_groups``; a summary study's expansion builds them so), built as
    ``Job`` objects only when first looked up: the parse and the jobs of a sweep read its runs as columns (``ids``,
    ``hashes``, ``columns``, ``work_seconds``, ``longest``)."""

    def __init__(self, groups: list[dict], fill=None):
        self._groups = groups
        self._len = sum(len(g["runs"]["h"]) for g in groups)
        #: group -> its problem_probe, for groups planned with it None (a sweep's parse: computed when first read)
        self._fill = fill

    def _filled(self, group: dict) -> dict:
        """The group with its ``problem_probe`` (``fill``, once)."""
        fields = group["fields"]
        if fields.get("problem_probe") is None and self._fill is not None:
            fields["problem_probe"] = self._fill(group)
        return group

    def _build(self) -> dict:
        return {job.id: job for job in _jobs_of({"job_groups": self.groups})}

    def __len__(self) -> int:
        return self._len

    def fill_with(self, fill) -> None:
        """``fill``: group -> its problem_probe, for the groups whose probe is None (computed when first read)."""
        self._fill = fill

    @property
    def raw_groups(self) -> list[dict]:
        """The groups as planned (a probe still to be computed: None)."""
        return self._groups

    @property
    def groups(self) -> list[dict]:
        """The groups as the plan records them (``job_groups``): per method and instance its fields, its runs'
        columns (``RUN_FIELDS`` and hash)."""
        return [self._filled(g) for g in self._groups]

    def _ids(self, group: dict) -> list[str]:
        f = group["fields"]
        prefix = f"{f['label']}/{f['combo']}/" if f["combo"] else f"{f['label']}/"
        return [prefix + run for run in group["runs"]["run"]]

    def ids(self) -> list[str]:
        """Every run's id, in order."""
        return [i for g in self._groups for i in self._ids(g)]

    def hashes(self) -> list[str]:
        """Every run's hash, in order."""
        return [h for g in self._groups for h in g["runs"]["hash"]]

    def job_hashes(self) -> list[list[str]]:
        """[[id, hash], ...] (``Study.job_hashes``) from the columns."""
        return [list(pair) for pair in zip(self.ids(), self.hashes())]

    def _run(self, group: dict, i: int = 0, probe: bool = True) -> Job:
        """The Job of run ``i`` of a group (``probe``: with its problem_probe, computed if it is still to be)."""
        runs = group["runs"]
        job = Job(**(self._filled(group) if probe else group)["fields"], **{f: runs[f][i] for f in RUN_FIELDS})
        job._hash = runs["hash"][i]
        return job

    def _steps(self, group: dict):
        import numpy as np

        h = np.asarray(group["runs"]["h"], dtype=float)
        return np.rint(group["fields"]["t_end"] / h).astype(np.int64)  # checked to be whole by the expansion

    def work_seconds(self) -> float:
        """``work_seconds`` of the jobs, per group (its runs share method, problem and backend)."""
        total, rates = 0.0, {}  # the rate once per method, problem and backend objects (a grid's groups share them)
        for g in self._groups:
            f, hs = g["fields"], g["runs"]["h"]
            key = (id(f["method"]), id(f["problem"]), f["backend"], id(f["params"]))
            if key not in rates:
                rates[key] = step_rate(f["method"], f["problem"], f["backend"], f["params"])
            units, seconds = rates[key]
            steps = sum(round(f["t_end"] / h) for h in hs)  # as _steps (half to even, as numpy's rint)
            total += len(hs) * RUN_OVERHEAD_S + steps * units * seconds  # as _group_seconds
        return total

    def longest(self) -> list[Job]:
        """Per group the Job of its run of the most steps (the first of them): a run's stored bytes grow with its
        steps at one ``save_every``, so it is the group's largest (what the limits check). Of groups whose longest
        runs have the same steps and ``save_every`` (a grid's instances), only the first: they store as much. Their
        problem_probe as planned (None where it is still to be computed)."""
        out, seen, same = [], set(), set()
        for g in self._groups:
            hs, t_end = g["runs"]["h"], g["fields"]["t_end"]
            if not hs:
                continue
            shared = (id(hs), t_end, g["fields"]["save_every"])  # a grid's groups share their list of h
            if shared in same:
                continue
            same.add(shared)
            steps = [round(t_end / h) for h in hs]  # as _steps (half to even, as numpy's rint)
            i = steps.index(max(steps))
            key = (steps[i], g["fields"]["save_every"])
            if key not in seen:
                seen.add(key)
                out.append(self._run(g, i, probe=False))  # what the limits read: no probe evaluated
        return out

    def columns(self) -> dict:
        """Per run, in order: id, label, combo, h, steps (``number_of_steps``, vectorised) and hash."""
        import numpy as np

        out: dict[str, list] = {"id": [], "label": [], "combo": [], "hash": []}
        hs, steps = [], []
        for g in self._groups:
            f, runs = g["fields"], g["runs"]
            n = len(runs["h"])
            out["id"] += self._ids(g)
            out["label"] += [f["label"]] * n
            out["combo"] += [f["combo"]] * n
            out["hash"] += runs["hash"]
            h = np.asarray(runs["h"], dtype=float)
            hs.append(h)
            steps.append(self._steps(g))
        out["h"] = np.concatenate(hs) if hs else np.zeros(0)
        out["steps"] = np.concatenate(steps) if steps else np.zeros(0, dtype=np.int64)
        return out


def _groups_of(rec: dict) -> list[dict]:
    """The job groups of a study record with each group's fields whole (``_shared_fields`` undone; the shared
    values one object for all the groups)."""
    shared = rec.get("job_fields")
    if not shared:
        return rec["job_groups"]
    return [{"fields": {**shared, **g["fields"]}, "runs": g["runs"]} for g in rec["job_groups"]]


def _jobs_of(rec: dict) -> list[Job]:
    if "jobs" in rec:
        return [Job(**j) for j in rec["jobs"]]
    out = []
    for group in _groups_of(rec):
        fields, runs = group["fields"], group["runs"]
        # the hash the parse computed (its plan is data it wrote; a worker's store records the hash it recomputes)
        for *values, digest in zip(*(runs[f] for f in RUN_FIELDS), runs["hash"]):
            job = Job(**fields, **dict(zip(RUN_FIELDS, values)))
            job._hash = digest
            out.append(job)
    return out


def _rows_of(cols: dict) -> list[Row]:
    return [Row(**dict(zip(ROW_FIELDS, values))) for values in zip(*(cols[f] for f in ROW_FIELDS))]


class PlannedRows(_BuiltOnDemand, Sequence):
    """A method's rows as the plan holds them (``ROW_FIELDS`` as columns), built as ``Row`` objects only when first
    looked at: the jobs of a sweep read the columns (``column``)."""

    __hash__ = None  # a list of rows: compared by value, not hashed

    def __init__(self, cols: dict):
        self._cols = cols

    def _build(self) -> list[Row]:
        return _rows_of(self._cols)

    def __len__(self) -> int:
        return len(self._cols["label"])

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def columns(self) -> dict:
        """Every field as a column (``ROW_FIELDS``), as the plan records them."""
        return self._cols

    def column(self, name: str) -> list:
        """One field of every row, in order (``ROW_FIELDS``)."""
        return self._cols[name]


def row_columns(rows) -> dict:
    """A method's rows as columns (``ROW_FIELDS``, the form the plan records): a ``PlannedRows``'s own, else read off
    its ``Row`` objects."""
    if isinstance(rows, PlannedRows):
        return rows.columns()
    return {name: [getattr(row, name) for row in rows] for name in ROW_FIELDS}
