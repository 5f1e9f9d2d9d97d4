"""What a Dask worker runs for a shard of a ``save: summary`` study (``shards.py``: the store it writes).

``solve_shard`` copies the rows of runs an earlier store holds, integrates the others by
``hbvm_core.integrate_ensemble`` (one call per method and compiled loop), and writes the shard's rows of every
array, then its record (``shards.write_shard``). ``warm_up`` compiles the ensemble loops of a cold kernel cache
before a local cluster starts its workers.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import time
from typing import Any

import numpy as np

from .layout import shard_record
from .pages import small_pages
from .shards import (
    COUNTS,
    read_rows,
    remove_record,
    row_backends,
    rows_from_records,
    run_lengths,
    write_shard,
)
from .state_errors import Instance, local, partial_columns
from .storage import StoreError
from .worker import WorkerError

_PROBLEMS: dict[str, Any] = {}


def _problem(p: dict, checked_in_group: bool = False):
    """A shard's problem of one grid combination, built once per worker and checked against the planned identity
    (``checked_in_group``: a combination of a Family's group that the plan gave no probe of, since the task checks
    the group's first, ``Structures.first``: built, not checked again)."""
    from hbvm_core.checks import derivative_checks
    from hbvm_core.fingerprint import problem_mismatch
    from hbvm_core.problems import get_problem

    key = json.dumps([p["problem"], p["params"], p["structure"]], sort_keys=True, default=repr)
    if key not in _PROBLEMS:
        with derivative_checks(False):  # checked when the study was expanded
            problem = get_problem(p["problem"], **p["params"])
        if p["structure"] and not (checked_in_group and not p["probe"]):
            why = problem_mismatch(problem, p["structure"], json.loads(p["probe"]) if p["probe"] else None)
            if why is not None:
                raise WorkerError(
                    f"{p['where']}: the problem on host {platform.node()} is not the one planned ({why}); run again"
                )
        _PROBLEMS[key] = problem
    return _PROBLEMS[key]


def entry_key(p: dict, memo: dict | None = None) -> str:
    """The problem entry of a shard spec's grid combination: the config's problem and the names of its params.
    Its combinations share a problem structure where the problem has a Family (``Structures``). ``memo``: the keys
    of the entries already met, by the problem object and the params' names (a spec's combinations share the one
    problem mapping they were unpickled with: one text per entry, not per grid value); it holds the problem, so
    that its id is not reused while the memo lives."""
    if memo is None:
        return json.dumps([p["problem"], sorted(p["params"])], sort_keys=True, default=repr)
    at = (id(p["problem"]), tuple(p["params"]))
    if at not in memo:
        memo[at] = (p["problem"], entry_key(p))
    return memo[at][1]


class Structures:
    """A shard's grid combinations by problem entry (the config's problem and the names of its params): ``group``
    maps a combination to its group; ``runs`` gives ``integrate_ensemble``'s problems and params of a group's runs.
    One problem is built per group where it has a Family (``hbvm_core.problems.family``: the built-in factories and
    formula problems, whose structure does not depend on the values) that takes the combinations' params as arrays;
    otherwise (a factory of the user's) one per combination."""

    def __init__(self, problems: dict):
        self.problems = {int(c): p for c, p in problems.items()}
        self.group: dict[int, int] = {}
        self.members: list[list[int]] = []
        ids: dict[str, int] = {}
        memo: dict = {}
        for c, p in self.problems.items():
            g = ids.setdefault(entry_key(p, memo), len(ids))
            if g == len(self.members):
                self.members.append([])
            self.members[g].append(c)
            self.group[c] = g
        self._first: dict[int, Any] = {}
        self._shared: dict[int, bool] = {}

    def first(self, g: int):
        """The problem of the group's first combination (built once, checked against the plan)."""
        if g not in self._first:
            self._first[g] = _problem(self.problems[self.members[g][0]])
        return self._first[g]

    def shared(self, c: int) -> bool:
        """Whether combination ``c``'s runs go through its group's Family: the group's first problem (checked) with
        the combinations' params as arrays."""
        from hbvm_core.problems.family import family_of

        g = self.group[int(c)]
        if g not in self._shared:  # a property of the group
            family = family_of(self.first(g))
            members = self.members[g]
            keys = set(self.problems[members[0]]["params"])
            self._shared[g] = family is not None and len(members) > 1 and keys <= set(family.shapes)
        return self._shared[g]

    def runs(self, g: int, combos: np.ndarray) -> tuple:
        """(problems, params) of the runs of group ``g`` whose combinations are ``combos``."""
        problem = self.first(g)
        members = self.members[g]
        keys = set(self.problems[members[0]]["params"])
        if not self.shared(members[0]):
            return [_problem(self.problems[c]) for c in combos.tolist()], None
        order = {c: j for j, c in enumerate(members)}
        at = np.array([order[c] for c in combos.tolist()], dtype=np.int64)
        params = {
            k: np.asarray([self.problems[c]["params"][k] for c in members], dtype=float)[at] for k in sorted(keys)
        }
        return problem, params


def loop_key(problem) -> tuple:
    """What decides the compiled loop of a problem (``hbvm_core.ensemble.structure_key``): runs with one key and
    one method share an ensemble call."""
    from hbvm_core.ensemble import structure_key

    return structure_key(problem)


def _by_structure(problems, params) -> list[tuple[np.ndarray, Any]]:
    """The runs of a group (``Structures.runs``) parted by compiled loop: [(positions, problems for
    ``integrate_ensemble``)], a part None where its problems have no compiled loop (the per-run numpy road,
    ``hbvm_core.per_run``). One problem with params as arrays is one part; a list of problems (a combination each:
    a chain over its number of links, each size another structure) one part per ``loop_key``."""
    if params is not None:
        return [(np.arange(len(next(iter(params.values())))), problems)]
    keys = [loop_key(pb) for pb in problems]
    parts: dict = {}
    for j, key in enumerate(keys):
        parts.setdefault(repr(key) if key != (None,) else None, []).append(j)
    out = []
    for key, at in parts.items():
        at = np.asarray(at, dtype=np.int64)
        out.append((at, None if key is None else [problems[j] for j in at.tolist()]))
    return out


def solve_shard(spec: dict) -> dict:
    """``compute_shard``, where an OSError of the host (a full disk, a quota, a read-only or lost file system) is not
    raised but returned, as {"slot", "host", "oserror": {"errno", "message"}}: the task does not fail, so Dask
    neither retries it nor logs it, and the solve step says it once for the whole study
    (``dispatch.describe_oserrors``). The shard keeps no record: the next solve computes it again."""
    from hbvm_core.errors import HBVMError

    try:
        return compute_shard(spec)
    except OSError as exc:
        if isinstance(exc, HBVMError):  # a store that is missing or damaged: the solve step's own errors
            raise
        with contextlib.suppress(OSError):  # a record's temporary that the full disk cut short
            os.remove(f"{shard_record(spec['store'], spec['slot'])}.{os.getpid()}.tmp")
        message = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
        return {"slot": spec["slot"], "host": platform.node(), "oserror": {"errno": exc.errno, "message": message}}


def compute_shard(spec: dict) -> dict:
    """Compute one shard into the study's sharded store (on a Dask worker): copy the rows of ``sources``,
    integrate the rows of ``compute`` by ``hbvm_core.integrate_ensemble`` (one call per method: the runs of a
    method share its compiled loop), write the shard's rows of every data array, then its record. Returns
    {"slot", "computed", "copied", "failed", "wall_s", "backend", "note", "host", "worker", "hosts", "workers"}
    ("hosts", "workers": where each run was computed, as run lengths; a copied run's from its source).

    The backend is chosen here, on the host that runs the shard (the study's key ``backend``): "cuda" demands the
    GPU (a BackendError naming the study and the key where this host has none), "auto" takes it where one is
    usable and a block is large enough (``hbvm_core.ensemble.GPU_MIN_RUNS``), else the CPU ensemble (the reason in
    "note"), "numba" the CPU ensemble. The record keeps the backend of each run (``backends``: a copied run's is
    its source's), as provenance: the runs' identity does not depend on it."""
    from hbvm_core.ensemble import require_gpu

    small_pages()  # a worker that Snakemake's process did not start (a SLURM worker job): before the arrays
    t0 = time.perf_counter()
    store, slot = spec["store"], spec["slot"]
    if spec.get("backend", "numba") == "cuda":  # a demanded GPU that this host lacks: before the store is touched
        _on_this_host(spec, require_gpu)
    rows = _ShardRows(spec)  # the copied runs' provenance read before this shard's record (a source) is removed
    remove_record(store, slot)  # from here until the record is written again the shard is incomplete
    rows.copy_sources()
    rows.integrate()
    result = rows.result(time.perf_counter() - t0)
    write_shard(
        store,
        slot,
        spec["start"],
        rows.arrays,
        spec["digest"],
        result,
        _partial(spec, rows.counts, rows.t, rows.y, rows.groups),
    )
    return result


class _ShardRows:
    """A shard's rows as ``compute_shard`` fills them: the store's data arrays (counts, scalars, t, y), and per run
    the backend it ran on (``ran``), its host and Dask worker (``where``) and, on the per-run road, its own wall
    time (``seconds``); a copied run's from its source."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        n, S, m, nu = spec["stop"] - spec["start"], spec["S"], spec["m"], spec["nu"]
        self.n, self.S, self.m, self.nu = n, S, m, nu
        self.ran = np.full(n, "", dtype=object)
        self.where = {key: np.full(n, "", dtype=object) for key in PROVENANCE}
        self.seconds = np.full(n, np.nan)
        for src in spec["sources"]:
            self.ran[src["dst"]] = row_backends(src["store"], src["src"])
            for key, values in row_provenance(src["store"], src["src"]).items():
                self.where[key][src["dst"]] = values
            self.seconds[src["dst"]] = row_seconds(src["store"], src["src"])
        self.counts = np.full((n, len(COUNTS)), -1, dtype=np.int64)
        self.scalars = np.full((n, 1 + 2 * nu), np.nan)
        self.t = np.full((n, S), np.nan)
        self.y = np.full((n, S, 2 * m), np.nan)
        self.used: set[str] = set()
        self.notes: set[str] = set()
        self.compute = np.asarray(spec["compute"], dtype=np.int64)
        self.groups = Structures(spec["problems"])  # the integration's and the partial results' (``_partial``)

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The store's data arrays of the shard, by name."""
        return {"counts": self.counts, "scalars": self.scalars, "t": self.t, "y": self.y}

    def copy_sources(self) -> None:
        """The rows of the runs copied from an earlier store."""
        for src in self.spec["sources"]:
            for name, arr in self.arrays.items():
                arr[src["dst"]] = read_rows(src["store"], name, src["src"])

    def put(self, rows: np.ndarray, res) -> None:
        """The runs ``rows`` of ``res`` into the shard's arrays: q at y[..., :m_i], p at y[..., m:m + m_i] and
        g_error, lam over the first nu_i constraints (a smaller instance than the store's: NaN past its own)."""
        k, mi, nui = res.t.shape[1], res.q.shape[2], res.lam.shape[1]
        if k > self.S:
            raise StoreError(
                self.spec["store"], "t", f"shard {self.spec['slot']}: {k} saved points, the store has room for {self.S}"
            )
        self.used.add(res.backend)
        self.ran[rows] = res.backend
        if res.backend_note:
            self.notes.add(res.backend_note)
        self.counts[rows] = np.stack([np.asarray(getattr(res, c), dtype=np.int64) for c in COUNTS], axis=1)
        self.scalars[rows, 0] = res.H_error
        self.scalars[rows, 1 : 1 + nui] = res.g_error
        self.scalars[rows, 1 + self.nu : 1 + self.nu + nui] = res.lam
        self.t[rows, :k] = res.t
        self.y[rows, :k, :mi] = res.q
        self.y[rows, :k, self.m : self.m + mi] = res.p

    def integrate(self) -> None:
        """The runs to compute: one call per method and problem structure (a problem built once per structure, the
        grid combinations' params given to it as arrays over the runs: its Family; a structure without one, a
        problem per combination); a problem without a compiled loop each run by the numpy loop."""
        from hbvm_core import integrate_ensemble
        from hbvm_core.methods import load_method_modules, method_from_entry
        from hbvm_core.per_run import integrate_summary

        spec, compute, groups = self.spec, self.compute, self.groups
        group_of = np.array([groups.group[int(c)] for c in spec["combo"][compute]], dtype=np.int64)
        scheme_of = spec["scheme"][compute].astype(np.int64)
        for i, g in sorted(set(zip(scheme_of.tolist(), group_of.tolist()))):
            rows = compute[(scheme_of == i) & (group_of == g)]
            meth = spec["methods"][i]
            if meth["module"]:
                load_method_modules([meth["module"]])
            method = method_from_entry(meth["entry"])
            problems, params = groups.runs(g, spec["combo"][rows])
            for part, sub in _by_structure(problems, params):
                rows_part = rows[part]
                if sub is None:  # no compiled loop: each run by the numpy loop (a sparse G's where it has one)
                    for r, problem in zip(rows_part.tolist(), [problems[j] for j in part.tolist()]):
                        res, self.seconds[r] = integrate_summary(
                            problem, method, float(spec["h"][r]), int(spec["N"][r]), int(spec["sample_every"][r]),
                            spec["compensated"],
                        )  # fmt: skip
                        self.put(np.array([r]), res)
                    continue
                res = _on_this_host(
                    spec,
                    integrate_ensemble,
                    sub,
                    method,
                    spec["h"][rows_part],
                    spec["N"][rows_part],
                    params=params,
                    sample_every=spec["sample_every"][rows_part],
                    compensated=spec["compensated"],
                    backend=spec.get("backend", "numba"),
                    threads=numba_threads(int(spec.get("threads", 1))),  # the solve's spread: a shard over its cores
                )
                self.put(rows_part, res)

    def result(self, wall: float) -> dict:
        """What the task returns and the shard's record keeps (``compute_shard``)."""
        host, worker = platform.node(), _worker_address()
        self.where["host"][self.compute], self.where["worker"][self.compute] = host, worker
        seconds = self.seconds
        return {
            "slot": self.spec["slot"],
            "computed": int(self.compute.size),
            "copied": int(self.n - self.compute.size),
            "failed": int(np.count_nonzero(self.counts[:, 0] != 0)),
            "wall_s": wall,
            "backend": ",".join(sorted(self.used)) or "copied",
            "backends": run_lengths(self.ran),
            "note": "; ".join(sorted(self.notes)),
            **(
                {"run_wall_s": [None if np.isnan(x) else float(x) for x in seconds]}
                if np.isfinite(seconds).any()
                else {}
            ),
            "host": host,
            "worker": worker,
            **{f"{key}s": run_lengths(values) for key, values in self.where.items()},  # hosts, workers: per run
        }


def _partial(spec: dict, counts, t, y, groups: Structures | None = None) -> tuple | None:
    """(values, errors, problems): the shard's partial results (``state_errors.partial_columns``) for
    ``shards.write_shard``; None with ``reference: self`` (a partner may be in another shard), or where they cannot
    be computed here (the aggregation then computes them from the states, and raises what there is to raise)."""

    errors = spec.get("errors")
    if not errors or errors["reference"] == "self":
        return None
    combos, at = local(spec["combo"])
    if any(c not in spec["problems"] for c in combos):
        return None
    problems = {c: spec["problems"][c] for c in combos}
    # a group's first problem checked (Structures.first), as the runs were; the integration's where given
    groups = groups or Structures(spec["problems"])
    instances = [
        Instance(problems[c]["params"], functools.partial(_problem, problems[c], checked_in_group=groups.shared(c)))
        for c in combos
    ]
    try:
        values = partial_columns(errors, instances, at, spec["N"], spec["sample_every"], counts, t, y, spec["m"])
    except Exception:  # noqa: BLE001 - an optimisation only: the aggregation computes them and says why not
        return None
    return values, errors, problems


#: what a shard's record says of where each of its runs was computed, as run lengths (``<key>s``)
PROVENANCE = ("host", "worker")


def _worker_address() -> str:
    """The address of the Dask worker running this task, "" outside a worker."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return ""


def record_provenance(record: dict | None, n: int) -> dict[str, np.ndarray]:
    """{"host", "worker"}: where each of a shard's ``n`` runs was computed, from its record (``hosts`` and
    ``workers``: run lengths; a copied run's are its source's); a record without them (written before they were
    kept): its one ``host`` for every run where it copied none, else ""."""
    record = record or {}
    out = {}
    for key in PROVENANCE:
        values = np.full(n, "", dtype=object)
        pairs = record.get(f"{key}s")
        if pairs and sum(c for _, c in pairs) == n:
            values[:] = np.repeat(np.array([v for v, _ in pairs], dtype=object), [c for _, c in pairs])
        elif record.get(key) and not record.get("copied"):
            values[:] = record[key]
        out[key] = values
    return out


def record_seconds(record: dict | None, n: int) -> dict[str, np.ndarray]:
    """{"seconds": the own wall time of each of a shard's ``n`` runs, from its record (``run_wall_s``: the runs
    integrated one by one, a copied run's from its source), NaN where it has none}."""
    own = (record or {}).get("run_wall_s")
    values = np.full(n, np.nan)
    if isinstance(own, list) and len(own) == n:
        values[:] = [np.nan if x is None else float(x) for x in own]
    return {"seconds": values}


def row_seconds(store: str, rows: np.ndarray) -> np.ndarray:
    """The own wall time of each of the runs ``rows`` of a sharded store (their shards' records), NaN where none."""
    got = rows_from_records(store, rows, record_seconds)["seconds"]
    return np.array([np.nan if x == "" else float(x) for x in got], dtype=float)


def row_provenance(store: str, rows: np.ndarray) -> dict[str, np.ndarray]:
    """{"host", "worker"}: where each of the runs ``rows`` of a sharded store was computed (its shard's record)."""
    return rows_from_records(store, rows, record_provenance)


def numba_threads(wanted: int) -> int:
    """The numba threads a shard task may use, at most ``wanted``: the environment's NUMBA_NUM_THREADS (a worker's
    ``env``) where numba's threads are not yet launched; else the count they were launched with (by an earlier task
    of this worker, or in the process a local worker was forked from), and the environment set back to it, since
    numba reads it again at each compile and refuses a launched pool's count changed."""
    import numba

    try:
        numba.config.reload_config()
    except RuntimeError:  # "Cannot set NUMBA_NUM_THREADS to a different value once the threads have been launched"
        os.environ["NUMBA_NUM_THREADS"] = str(numba.config.NUMBA_NUM_THREADS)
    return max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))


def _on_this_host(spec: dict, f, *args, **kwargs):
    """f(*args, **kwargs); its BackendError (backend cuda demanded, and no GPU or no GPU loop here: "auto" falls back
    instead) as one line naming the study, its key and this host."""
    from hbvm_core.errors import BackendError

    try:
        return f(*args, **kwargs)
    except BackendError as exc:
        raise BackendError(
            f"studies.{spec['study']}.backend = {spec['backend']!r} on host {platform.node()}: {exc}; "
            "give backend auto to run on the CPU where no GPU is found"
        ) from None


def warm_up(specs: list[dict], processes: int = 1, tell=None) -> int:
    """Compile (or find in the kernel cache) the ensemble loop of each (method, problem structure) of ``specs`` by a
    one-step run in ``processes`` fresh processes (spawned: a process that ran a parallel loop must not fork
    Dask's workers), so that the workers load the loops from the disk cache; returns how many. ``tell(studies,
    line)``, where given, receives a line per loop compiled or loaded (``registry.LoopTime``). A failure is left
    to the shard tasks, which report it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from hbvm_core.kernels.lanes import LANES
    from hbvm_core.methods import method_label
    from hbvm_core.problems import problem_name

    distinct: dict[str, tuple] = {}
    studies: dict[str, set] = {}
    loops: dict[str, tuple] = {}
    memo: dict = {}
    keys: dict[tuple, str] = {}
    for spec in specs:
        compute = np.asarray(spec["compute"], dtype=np.int64)
        groups = Structures(spec["problems"])
        for i, c in set(zip(spec["scheme"][compute].tolist(), spec["combo"][compute].tolist())):
            problem = spec["problems"][c]
            pkey = entry_key(problem, memo)  # one problem built per problem entry, not per grid value
            if pkey not in loops:
                try:
                    loops[pkey] = loop_key(_problem(problem))
                except Exception:  # noqa: BLE001 - the shard task reports it
                    loops[pkey] = (pkey,)
            if (id(spec), i, pkey) not in keys:
                keys[id(spec), i, pkey] = json.dumps([spec["methods"][i]["entry"], repr(loops[pkey])], sort_keys=True)
            key = keys[id(spec), i, pkey]
            if key not in distinct:
                # the shard's own road: the first combinations of c's group (its params as arrays, as the shard
                # task gives them), enough runs for a lockstep block
                members = groups.members[groups.group[int(c)]][:LANES]
                problems = {m: spec["problems"][m] for m in members}
                distinct[key] = (spec["methods"][i], problems, float(spec["h"][0]))
            studies.setdefault(key, set()).add(spec["study"])
    if not distinct:
        return 0
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, min(processes, len(distinct))), mp_context=ctx) as pool:
        times = list(pool.map(_warm_one, distinct.values()))
    for key, (meth, problems, _), loops in zip(distinct, distinct.values(), times):
        for loop in loops if tell is not None else ():
            name = f"{problem_name(next(iter(problems.values()))['problem'])}, {method_label(meth['entry'])}"
            tell(studies[key], f"{name}: {loop.phrase()}")
    return len(distinct)


def _warm_one(item: tuple) -> list:
    """One-step runs of (method, a group's first combinations, h) by the shard task's road (``Structures.runs``:
    the group's params as arrays where it has a Family), at least ``MIN_GROUP`` of them, so that the loop the shard
    tasks will take (a lockstep block with a params row per lane, or the per-run block) is the one compiled here;
    returns the loops it compiled or loaded (``registry.LoopTime``)."""
    from hbvm_core import integrate_ensemble
    from hbvm_core.kernels import registry
    from hbvm_core.kernels.lanes import MIN_GROUP
    from hbvm_core.methods import load_method_modules, method_from_entry

    meth, problems, h = item
    since = len(registry.LOOP_TIMES)
    try:
        if meth["module"]:
            load_method_modules([meth["module"]])
        groups = Structures(problems)
        combos = np.resize(np.asarray(groups.members[0], dtype=np.int64), max(MIN_GROUP, len(groups.members[0])))
        runs, params = groups.runs(0, combos)
        h_runs = np.full(combos.size, h)
        integrate_ensemble(runs, method_from_entry(meth["entry"]), h_runs, 1, params=params, backend="numba")
    except Exception:  # noqa: BLE001 - the shard task reports it
        pass
    return registry.loop_times(since)


def cold_ensembles(specs: list[dict]) -> bool:
    """Whether the ensemble loop of one of the shards' (method, problem) pairs is not in the kernel cache yet
    (``block_cached``; where it cannot tell, ``hbvm_core.kernels.uncached_loop`` of the scalar loop): then
    ``warm_up`` compiles them before the workers start."""
    from hbvm_core.kernels import uncached_loop
    from hbvm_core.methods import method_from_entry

    seen = set()
    memo: dict = {}
    for spec in specs:
        compute = np.asarray(spec["compute"], dtype=np.int64)
        pairs = np.unique(np.stack([spec["scheme"][compute], spec["combo"][compute]]), axis=1)  # (method, combo)
        for i, c in pairs.T.tolist():
            try:
                # one problem built per problem entry (``entry_key``), not per grid value
                first = (json.dumps(spec["methods"][i]["entry"], sort_keys=True), entry_key(spec["problems"][c], memo))
                if first in seen:
                    continue
                seen.add(first)
                problem = _problem(spec["problems"][c])
                key = (first[0], loop_key(problem))
                if key in seen:
                    continue
                seen.add(key)
                method = method_from_entry(spec["methods"][i]["entry"])
                cached = block_cached(method, problem)
                if cached is None:  # cannot tell: the scalar loop's marker
                    cached = uncached_loop(method, problem) is None
                if not cached:
                    return True
            except Exception:  # noqa: BLE001 - the shard task reports it
                continue
    return False


def block_cached(method, problem) -> bool | None:
    """Whether numba's disk cache holds a valid entry of the ensemble loop that a shard's runs of (method, problem)
    take, read from its cache index without compiling: the lockstep block where the loop has one
    (``kernels/lanes.py``: every call of ``lanes.MIN_GROUP`` runs or more, as ``warm_up``'s), else the per-run
    block (the generated module's ``run_block``); None where it cannot tell (no compiled loop, an in-memory module,
    another numba). The scalar loop's marker (``uncached_loop``) is written only after a scalar run, and a sweep
    in lockstep never compiles ``run_block``: either, asked for, made every solve job of such a sweep warm it
    again (1.7 s of a 2000-run sweep's solve job)."""
    try:
        from hbvm_core.kernels import lanes

        runner = method.compiled_runner(problem)
        if lanes.applies(runner, problem.m, problem.nu):
            loop = lanes.lane_module(problem, runner).lane_block
        else:
            loop = runner.module.run_block
        return bool(loop._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - no cache to read: the caller falls back to the scalar loop's marker
        return None
