"""Errors and rates of a ``save: summary`` study over its run dimension at once (docs/method.md section 5).

The runs are read from the study's sharded store (``shards.read_all``) as arrays; per problem instance (grid
combination) the reference (``hbvm_core.references.reference_solution``: the closed form, or the reference
ODE) is evaluated once at every distinct sample time of its runs, then for every run at once:

e_s  = max over its sample points of ||y_n - y_ref(t_n)||          (the convention's norm)
e_hc = max over its sample points of ||G(q_n)^T M^-1 p_n||         (hc_norm, else the norm)
e_H  = H_error, e_g = max_i g_error_i                              (over the saved points: the sample points
                                                                    and the final one)

With ``errors.reference: self`` the reference of a row's run is its h/2 partner's state at the same sample times
(a run of the study's store too); a row whose partner failed has no e_s ("partner failed").
e_lambda: not computed (NaN): a summary keeps the multiplier of the last step only.

Rates between consecutive rows of one method and combination (h decreasing) as ``hbvm_core.metrics.rates``,
none at the numerical reference's accuracy nor between two errors at the round-off floor (``tables.block_rates``'
rules, vectorised). errors.csv,
errors.zarr and timings.csv have the columns and layout of a study of run stores (``tables.compute_errors``).
"""

from __future__ import annotations

import numpy as np

from hbvm_core.metrics import roundoff_floors

from . import partials
from .csv_table import write_columns
from .forking import beside, forked_map
from .integrity import file_digest
from .layout import COLUMNS, EXTRA, TIMINGS, shard_store, tmp_dir
from .runs import PlannedJobs, row_columns
from .shard_worker import record_seconds, row_provenance
from .shards import DATA, read_all, read_record, row_backends, run_table
from .state_errors import _max_per_run, _norm, local, partial_columns, sample_mask, state_errors  # noqa: F401  (re-exported)
from .storage import ResultsMismatchError, write_dataset
from .study import Study
from .tables import (
    NUMERIC,
    ORDER_OF_RATE,
    REFERENCE_FLOOR,
    REFERENCE_MARGIN,
    ROUNDOFF,
    STATUS,
    dense_errors_dataset,
    reference_floor,
)

#: the columns of summary_columns that index errors.zarr: the scheme, the grid combination and n of each run
INDEX_COLUMNS = ("scheme_index", "combo_index", "n_value")
#: kernels/rules.py's status codes, as a failed row's ``error`` names them
STATUS_WORDS = {1: "no convergence", 2: "diverged", 3: "singular", 4: "non-finite state"}


def summary_columns(
    study: Study, timings: dict | None = None, workers: int = 1, use_partials: bool = True, tell=None
) -> dict[str, np.ndarray]:
    """The columns of errors.csv of a sharded study (COLUMNS + EXTRA + the grid keys) as arrays, one per row in
    plan order, and the round-off flags, ``wall_s`` and ``host`` of errors.zarr. ``timings``: filled with the
    columns of timings.csv but ``backend`` (``host`` and ``worker``: the shards' records'): one per run (h/2
    partners included), plan order.
    ``workers``: processes for the instances' reference ODE solves. ``use_partials`` (not with ``reference: self``):
    e_s, e_hc and the scale of each run from its shard's partial results (``gather_partials``: the states are read
    only for a shard whose partial is missing or stale; ``tell``: called with a line for each), else from the
    states of every shard."""

    path = shard_store(study.results, study.name)
    table = run_table(study)
    instances = study.instances or [study.instance_of("")]
    run, partner = row_runs(study)
    use_partials = use_partials and study.reference != "self"
    if use_partials:
        attrs, a, part, _ = gather_partials(study, table, path, tell)
    else:
        attrs, a = read_all(path, DATA)  # the run table gives the other coordinates
    if not (np.array_equal(a["hash"], table.hash) and np.array_equal(a["sample_every"], table.sample_every)):
        raise ResultsMismatchError(f"{path}: holds other runs than study {study.name!r} plans; run the solve step")
    S, m = attrs["S"], attrs["m"]
    counts = a["counts"]
    status, fail_step, steps_done, iterations, n_saved = (counts[:, i] for i in (0, 1, 2, 3, 5))
    ok = status == 0
    at = run if (partner >= 0).any() else slice(None)  # without partners the rows are the runs: views, no copies
    if use_partials:
        e_s, e_hc, scale = part[:, 0], part[:, 1], part[:, 2]
        floors = _accuracies(study, instances, table.combo[ok], workers)
    else:
        y, t = a["y"], a["t"]
        mask = sample_mask(n_saved, table.N, table.sample_every, S, study.convention.sample)
        valid = np.arange(S)[None, :] < n_saved[:, None]
        scale = np.maximum(1.0, np.nanmax(np.where(valid[..., None], np.abs(y), 0.0), axis=(1, 2), initial=0.0))
        e_s, e_hc, floors = state_errors(study, table, y, t, m, mask, ok, run, partner, workers)
    scalars = a["scalars"]
    nu = attrs["nu"]
    e_H = np.where(ok, scalars[:, 0], np.nan)
    # fmax: NaN past a smaller instance's constraints (a chain over its number of links) is not a value
    e_g = np.where(ok, np.fmax.reduce(scalars[:, 1 : 1 + nu], axis=1, initial=0.0), np.nan)
    with np.errstate(all="ignore"):
        mean_it = np.where(ok, iterations / np.maximum(steps_done, 1), np.nan)
    words = _errors(status, fail_step)
    wall = _wall(path, table)
    where = row_provenance(path, np.arange(table.runs))  # the host and Dask worker of each run (its shard's record)
    methods = study.methods
    labels = np.array([sm.label for sm in methods], dtype=object)
    names = np.array([sm.name for sm in methods], dtype=object)
    grid_values = {key: np.array([inst.values[key] for inst in instances], dtype=object) for key in study.grid}
    if timings is not None:  # one per run
        timings.update(
            study=np.full(table.runs, study.name, dtype=object),
            method=labels[table.scheme],
            name=names[table.scheme],
            h=table.h,
            steps=table.N,
            wall_s=wall,
            status=np.where(ok, "ok", "failed").astype(object),
            **{key: values[table.combo] for key, values in grid_values.items()},
            **where,
        )
    # the rows: their runs' numbers; a row whose h/2 partner failed has no e_s (tables.study_rows' rule)
    R = run.size
    row_ok = ok[at]
    lost = row_ok & (partner >= 0) & ~ok[np.maximum(partner, 0)]
    error = words[at]
    error[lost] = np.array([f"h/2 run: {w}" for w in words[partner[lost]]], dtype=object)
    nan = np.full(R, np.nan)
    cols: dict[str, np.ndarray] = {
        "e_s": np.where(lost, np.nan, e_s),
        "e_lambda": nan.copy(),
        "e_H": e_H[at],
        "e_g": e_g[at],
        "e_hc": e_hc[at],
    }
    h, scheme, combo, row_scale = table.h[at], table.scheme[at], table.combo[at], scale[at]
    block = scheme.astype(np.int64) * (len(instances) + 1) + combo
    none = np.full(R, np.nan)
    for rate, e, sc, ref in (
        ("rate_s", "e_s", row_scale, floors[combo]),  # the reference's accuracy of each row's instance (NaN: none)
        ("rate_lambda", "e_lambda", row_scale, none),
        ("rate_hc", "e_hc", row_scale**2, none),
    ):
        cols[rate], cols[f"roundoff_{rate[5:]}"], below = _rates(h, cols[e], block, sc, ref)
        if rate in REFERENCE_FLOOR:
            cols[REFERENCE_FLOOR[rate]] = below
        cols[ORDER_OF_RATE[rate]] = _fitted(h, cols[e], block, sc, ref)
    cols["e_g_constraint"] = np.where(row_ok[:, None], scalars[at, 1 : 1 + nu], np.nan)
    n = table.n[at]
    cols.update(
        problem=np.full(R, study.problem, dtype=object),
        k=np.array([sm.k for sm in methods], dtype=object)[scheme],
        s=np.array([sm.s for sm in methods], dtype=object)[scheme],
        h=h,
        steps=table.N[at],
        mean_iterations=mean_it[at],
        study=np.full(R, study.name, dtype=object),
        method=labels[scheme],
        name=names[scheme],
        n=np.where(n >= 0, n, None).astype(object) if (n < 0).any() else n,
        t_end=np.array([inst.t_end for inst in instances])[combo],
        status=np.where(row_ok, np.where(lost, "partner failed", "ok"), "failed").astype(object),
        error=error,
    )
    for key, values in grid_values.items():
        cols[key] = values[combo]
    cols["reference_accuracy"] = floors[combo]  # the reference's accuracy of each row's instance (NaN: none)
    cols["wall_s"] = wall[at]
    cols["host"] = where["host"][at]  # errors.zarr's: the host of the row's run
    cols.update(zip(INDEX_COLUMNS, (scheme, combo, n)))  # errors.zarr's indices (n -1: none)
    return cols


def _accuracies(study: Study, instances: list, combos: np.ndarray, workers: int = 1) -> np.ndarray:
    """The reference's accuracy (``tables.reference_floor``) of each instance with a completed run (``combos``: their
    instances), NaN for the others and where there is none; a numerical one estimated by ``workers`` processes."""
    from hbvm_core.references import resolved_kind

    out = np.full(len(instances), np.nan)
    c = study.convention
    if study.reference != "reference" or all(
        resolved_kind(i.problem, c.reference_kind) != "ode" for i in instances[:1]
    ):
        return out  # a closed form (one instance tells: the instances share their problem's callbacks) or none
    todo = np.unique(combos).tolist()
    found = forked_map(lambda i: reference_floor(study, instances[todo[i]]), len(todo), workers)
    for ci, floor in zip(todo, found):
        out[ci] = np.nan if floor is None else floor
    return out


def row_runs(study: Study) -> tuple[np.ndarray, np.ndarray]:
    """(run, partner): per row of the study (plan order) the index of its run in the run table and of its h/2
    partner (``errors.reference: self``; -1: none). Without partners the rows are the runs, in order."""

    R = len(study.jobs)
    if study.reference != "self":
        return np.arange(R), np.full(R, -1)
    ids = study.jobs.ids() if isinstance(study.jobs, PlannedJobs) else list(study.jobs)  # a job's key is its id
    index = {job_id: i for i, job_id in enumerate(ids)}
    run, partner = [], []
    for sm in study.methods:
        cols = row_columns(sm.rows)
        run += map(index.__getitem__, cols["job"])
        partner += map(index.__getitem__, cols["partner"])
    return np.array(run, dtype=np.int64), np.array(partner, dtype=np.int64)


def _rates(h: np.ndarray, e: np.ndarray, block: np.ndarray, scale: np.ndarray, reference=None):
    """(rate, round-off flag, reference-floor flag) of each row against the previous row of its block
    (``metrics.rates``): no rate where the row's error is at most REFERENCE_MARGIN times its ``reference`` accuracy
    (NaN: none; ``tables.at_reference_floor``), nor, else, where both errors are at most ROUNDOFF_ULPS eps times
    the larger scale of the two (``metrics.at_roundoff``)."""

    rate = np.full(e.shape, np.nan)
    flag = np.zeros(e.shape, dtype=bool)
    below = np.zeros(e.shape, dtype=bool)
    if e.size < 2:
        return rate, flag, below
    same = block[1:] == block[:-1]
    e0, e1 = e[:-1], e[1:]
    with np.errstate(all="ignore"):
        r = np.log(e0 / e1) / np.log(h[:-1] / h[1:])
    floor = roundoff_floors(np.maximum(scale[:-1], scale[1:]))
    pair = same & np.isfinite(e0) & np.isfinite(e1)
    ref = np.full(e.shape, np.nan) if reference is None else np.asarray(reference, dtype=float)
    with np.errstate(invalid="ignore"):
        at_ref = pair & (e1 <= REFERENCE_MARGIN * ref[1:])  # NaN (no reference floor): False
    at_floor = pair & (e0 <= floor) & (e1 <= floor) & ~at_ref
    good = same & np.isfinite(r) & (e0 > 0) & (e1 > 0) & ~at_floor & ~at_ref
    rate[1:][good] = r[good]
    flag[1:] = at_floor
    below[1:] = at_ref
    return rate, flag, below


def _fitted(h: np.ndarray, e: np.ndarray, block: np.ndarray, scale: np.ndarray, reference=None) -> np.ndarray:
    """The fitted order of each block's errors (``metrics.fitted_orders``, as ``tables.fit_orders``: the floor of
    each row from its scale, and at least REFERENCE_MARGIN times its ``reference`` accuracy where not NaN) on the
    rows of its asymptotic range, NaN on the others; a block is consecutive rows."""
    from hbvm_core.metrics import fitted_orders

    out = np.full(e.shape, np.nan)
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]]) if e.size else np.zeros(0, dtype=np.int64)
    floor = roundoff_floors(scale)
    if reference is not None:
        floor = np.fmax(floor, REFERENCE_MARGIN * np.asarray(reference, dtype=float))  # fmax: NaN is no floor
    p, first, last = fitted_orders(h, e, floor, starts)
    for j in np.flatnonzero(first >= 0).tolist():
        out[first[j] : last[j] + 1] = p[j]
    return out


def _errors(status: np.ndarray, fail_step: np.ndarray) -> np.ndarray:
    """The ``error`` column: "" for a run that completed, else its status in words and the failing step."""
    out = np.full(status.shape, "", dtype=object)
    for i in np.flatnonzero(status != 0):
        out[i] = f"step {int(fail_step[i])}: {STATUS_WORDS.get(int(status[i]), f'status {int(status[i])}')}"
    return out


def _wall(path: str, table) -> np.ndarray:
    """Each run's wall time: its own where the shard timed it (``run_wall_s``), else its share of the shard's
    (the shard's record); NaN where not recorded."""

    out = np.full(table.runs, np.nan)
    for slot, (a, b) in enumerate(table.slots()):
        rec = read_record(path, slot) or {}
        if rec.get("wall_s") is not None and rec.get("computed"):
            out[a:b] = float(rec["wall_s"]) / (b - a)
        timed = record_seconds(rec, b - a)["seconds"]  # the runs integrated one by one, timed each
        out[a:b] = np.where(np.isnan(timed), out[a:b], timed)
    return out


def summary_dataset(study: Study, cols: dict[str, np.ndarray]):
    """errors.zarr's Dataset over (scheme, h, *grid) from the columns (``tables.dense_errors_dataset``)."""

    instances = study.instances or [study.instance_of("")]
    distinct, inverse = np.unique(cols["h"], return_inverse=True)
    hs = distinct[::-1].tolist()  # the step sizes decreasing
    h_index = distinct.size - 1 - inverse.reshape(-1)
    at = [cols["scheme_index"], h_index]
    position = study.grid_positions()
    index = np.array([position(inst.values) for inst in instances], dtype=np.int64).reshape(len(instances), -1)
    for j in range(len(study.grid)):
        at.append(index[:, j][cols["combo_index"]])
    shape = (len(study.methods), len(hs), *(len(v) for v in study.grid.values()))
    idx = tuple(at)
    data = {}
    for c in NUMERIC + ("wall_s",):
        arr = np.full(shape, np.nan)
        arr[idx] = np.asarray(cols[c], dtype=float)
        data[c] = arr
    flags = {}
    for f in (*ROUNDOFF.values(), *REFERENCE_FLOOR.values()):
        arr = np.zeros(shape, dtype=bool)
        arr[idx] = cols[f]
        flags[f] = arr
    status = np.full(shape, -1, dtype="i1")
    codes = np.zeros(len(cols["status"]), dtype="i1")
    for word, code in STATUS.items():  # ok, failed, partner failed
        codes[cols["status"] == word] = code
    status[idx] = codes
    nval = np.full(shape, -1, dtype="i8")
    n = cols["n_value"]  # -1: none
    nval[idx] = n
    host = np.full(shape, "", dtype=object)
    host[idx] = cols["host"]
    by_h: dict[float, set] = {}  # h -> its row labels n (None: none)
    for j, v in np.unique(np.stack([h_index, n]), axis=1).T.tolist():
        by_h.setdefault(hs[j], set()).add(None if v < 0 else v)
    each = np.full((*shape, study.dims[1]), np.nan)
    each[idx] = cols["e_g_constraint"]
    accuracy = np.full(shape[2:], np.nan)
    found = np.asarray(cols["reference_accuracy"], dtype=float)
    if study.grid:
        accuracy[idx[2:]] = found
    elif found.size:  # one instance: its accuracy, a scalar
        accuracy[()] = found[0]
    return dense_errors_dataset(study, hs, data, flags, status, host, nval, by_h, each, accuracy)


def _load_xarray() -> None:
    """Import what building and writing errors.zarr's Dataset imports: xarray, its zarr backend, and dask where
    installed (xarray looks for it when it makes a variable)."""
    import xarray as xr
    import xarray.backends.zarr  # noqa: F401

    xr.Variable("d", np.zeros(1))


def compute_summary_errors(
    study: Study, out_zarr: str, out_csv: str, out_timings: str, workers: int = 1, tell=None, use_partials=True
) -> list[dict]:
    """errors.zarr, errors.csv and timings.csv of a sharded study; returns a short list of row summaries
    ({"status"} per row: what the aggregate step counts). With ``workers`` > 1 errors.zarr is written by a process
    forked at the start (``forking.beside``), which imports xarray while this one computes the columns, then builds
    the Dataset from the columns handed to it while this one writes the CSV files. ``tell``: called with a line per
    shard whose partial results were computed again (``gather_partials``); ``use_partials``: as ``summary_columns``."""

    def errors_zarr(cols: dict) -> None:
        write_dataset(summary_dataset(study, cols), out_zarr, tmp_dir=tmp_dir(study.results, study.name))

    dataset_columns = (
        *NUMERIC,
        "wall_s",
        *ROUNDOFF.values(),
        *REFERENCE_FLOOR.values(),
        "h",
        "status",
        "e_g_constraint",
        "reference_accuracy",
        "host",
    ) + INDEX_COLUMNS
    with beside(_load_xarray, errors_zarr, parallel=workers > 1) as send:
        timing: dict = {}
        cols = summary_columns(study, timing, workers, use_partials, tell)
        send({c: cols[c] for c in dataset_columns})
        grid = tuple(study.grid)
        write_columns(cols, out_csv, COLUMNS + EXTRA + grid, workers)  # its rows' text in two processes
        R = len(timing["h"])
        timing["backend"] = row_backends(shard_store(study.results, study.name), np.arange(R))  # its record's
        write_columns(timing, out_timings, TIMINGS + grid)
    return [{"status": s} for s in cols["status"]]


def gather_partials(study, table, path: str, tell=None) -> tuple[dict, dict[str, np.ndarray], np.ndarray, list[str]]:
    """(attrs, arrays, partial, notes) of a complete sharded store, for the aggregation: its coordinates ``hash``
    and ``sample_every`` and its ``counts`` and ``scalars`` read whole (their files checked byte for byte against
    the records, as ``shards.read_all``), and per shard its partial [run, COLUMNS] where ``read`` takes it, else
    computed again from the shard's states (their files then checked byte for byte too); ``notes``: a line per
    shard computed again (``tell``: called with each)."""
    import zarr

    from .shards import (
        MissingStoreError,
        _read_whole,
        read_record,
        read_rows,
        require_format,
        require_sealed,
        shard_error,
        shard_files,
        shard_problem,
        slot_digest,
    )

    attrs = require_format(path)
    require_sealed(path)
    R, sr = attrs["runs"], attrs["shard_runs"]
    g = zarr.open_group(path, mode="r")
    arrays = {name: np.asarray(g[name][:R]) for name in ("hash", "sample_every")}
    records = []
    for slot, a in enumerate(range(0, R, sr)):
        rec = read_record(path, slot)
        if (rec or {}).get("digest") != slot_digest(arrays["hash"][a : a + sr], arrays["sample_every"][a : a + sr]):
            raise MissingStoreError(f"{path}: shard {slot} is not complete; run the workflow again")
        found = shard_problem(path, slot, rec, deep=False, group=g)  # every file there, of its size
        files = shard_files(path, slot, g)
        for name in ("counts", "scalars"):  # read whole below: checked byte for byte, as read_all does
            want = rec["files"][name]
            if found is None and want is not None and file_digest(files[name]) != want[1]:
                found = (name, files[name], "shard file changed after the shard was written (its digest differs)")
        if found is not None:
            raise shard_error(path, slot, found)
        records.append((rec, files))
    for name in ("counts", "scalars"):
        arrays[name] = _read_whole(path, g[name], R, sr)
    partial = np.full((R, len(partials.COLUMNS)), np.nan)
    errors = partials.errors_spec(study)
    notes = []
    for slot, (a, (rec, files)) in enumerate(zip(range(0, R, sr), records)):
        b = min(a + sr, R)
        problems = partials.study_problems(study, table.combo[a:b])
        values, why = partials.read(
            path, slot, rec, partials.key(errors, problems, rec["digest"], rec["files"]), files, b - a
        )
        if values is None:
            found = shard_problem(path, slot, rec, deep=True, group=g)  # the states it is computed from, as written
            if found is not None:
                raise shard_error(path, slot, found)
            rows = np.arange(a, b)
            combos, at = local(table.combo[a:b])
            instances = study.instances or [study.instance_of("")]
            values = partial_columns(
                errors,
                [instances[c] for c in combos],
                at,
                table.N[a:b],
                table.sample_every[a:b],
                arrays["counts"][a:b],
                read_rows(path, "t", rows),
                read_rows(path, "y", rows),
                attrs["m"],
            )
            notes.append(f"shard {slot}: {why}; its errors computed again from its states")
            if tell is not None:
                tell(notes[-1])
        partial[a:b] = values
    return attrs, arrays, partial, notes
