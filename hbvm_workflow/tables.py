"""Aggregation of a solved study: errors and rates per (scheme, h), as Zarr, CSV, Markdown and LaTeX.

Every number comes from ``hbvm_core.metrics.errors`` and ``metrics.rates``
(docs/method.md section 5): one row per method and step size, rates between
consecutive rows of a method. A failed run (or a failed h/2 partner for
reference: self) is a row with status "failed" and no numbers; the aggregation
still completes, and the tables print "failed", never a NaN as a number.

errors.csv holds only what the runs determine, so it is bit-identical however
the study ran (workers, resumes); what was measured -- each run's wall time,
backend and Dask worker -- goes to timings.csv (and wall_s to errors.zarr).
"""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np

from hbvm_core.metrics import REFERENCE_MARGIN  # noqa: F401  (re-exported: an e_s within it is the reference's)

from . import grid_tables
from .beyond import measure, timing_repeats
from .csv_table import write_rows
from .forking import forked_map
from .grid_tables import is_compact
from .layout import (  # noqa: F401  (re-exported)
    COLUMNS,
    EXTRA,
    MEASURED,
    TIMINGS,
    combo_name,
    manifest_of_store,
    manifest_path,
    timings_beside,
    tmp_dir,
)
from .storage import (  # noqa: F401  (MissingStoreError re-exported)
    MissingStoreError,
    ResultsMismatchError,
    file_signature,
    load_trajectory,
    open_errors_at,
    read_attrs,
    read_failure,
    write_dataset,
)
from .study import Study
from .worker import solve_job

NUMERIC = ("e_s", "rate_s", "e_lambda", "rate_lambda", "e_H", "e_g", "e_hc", "rate_hc")
NUMERIC += ("order_s", "order_lambda", "order_hc", "steps", "mean_iterations")
STATUS = {"ok": 0, "failed": 1, "partner failed": 2}
RATES = {"rate_s": "e_s", "rate_lambda": "e_lambda", "rate_hc": "e_hc"}
#: fitted-order column -> its error (``hbvm_core.metrics.fitted_order``): the order on the rows of its range
ORDERS = {"order_s": "e_s", "order_lambda": "e_lambda", "order_hc": "e_hc"}
#: rate column -> its fitted-order column
ORDER_OF_RATE = {"rate_s": "order_s", "rate_lambda": "order_lambda", "rate_hc": "order_hc"}
#: rate column -> the flag (errors.zarr only) of a pair of errors both at the round-off floor
ROUNDOFF = {"rate_s": "roundoff_s", "rate_lambda": "roundoff_lambda", "rate_hc": "roundoff_hc"}
#: rate column -> the flag (errors.zarr only) of a pair of errors whose finer one is at the reference floor
REFERENCE_FLOOR = {"rate_s": "reference_floor_s"}


def reference_floor(study: Study, inst) -> float | None:
    """The accuracy of the study's numerical reference for the instance ``inst`` (``metrics.reference_accuracy``:
    the ODE reference against a tighter solve of it); None unless ``errors.reference: reference`` resolves to the
    ODE. e_s at or below it measures the reference, not the method."""
    from hbvm_core.metrics import reference_accuracy

    c = study.convention
    reference_kind = getattr(c, "reference_kind", "auto")
    return reference_accuracy(
        inst.problem, inst.t_end, c.norm, study.reference, reference_kind, getattr(c, "rtol", None)
    )


def at_reference_floor(e_prev: float, e: float, floor: float | None) -> bool:
    """True when a rate pair's finer error ``e`` is at most REFERENCE_MARGIN times the reference's accuracy
    ``floor`` (both errors finite): its "rate" is the reference's, not the method's."""
    if floor is None or not (math.isfinite(e_prev) and math.isfinite(e)):
        return False
    return e <= REFERENCE_MARGIN * floor


def _load(job, cache: dict, problem, planned=None):
    """A job's trajectory (None if it failed), cached for its use as the next row's h/2 partner.

    ``problem``: the study's, built from the config (a store is data: it never builds one); ``planned``: its
    identity (``Instance.checked``), which the store's record is compared with."""
    from .storage import (
        Expected,
        StoreError,
        StoreMismatchError,
        load_trajectory,
        mismatch_phrase,
        read_failure,
        set_aside,
        store_verdict,
    )

    if job.id in cache:
        return cache[job.id]
    status = "complete"
    try:  # one read, by the predicate of the solve step (storage.store_verdict): damage raises StoreError
        traj = load_trajectory(job.store, problem, job=job, planned=planned)
    except (FileNotFoundError, StoreMismatchError):
        verdict = store_verdict(job.store, Expected.of_job(job, planned))
        status = verdict.status
        if status in ("stale", "altered"):  # not the run it claims to be: set aside, recomputed here, this run
            aside = set_aside(job.store) if status == "altered" else None
            traj = _recompute(job, problem, f"store {job.store} {mismatch_phrase(verdict)}", aside, planned)
            cache.setdefault("recomputed", []).append(job.id)
            status = "complete" if traj is not None else "failed"
    except StoreError as exc:  # damaged: set aside by the reader; recomputed here, this run
        array = f"array {exc.array}: " if exc.array else ""
        line = f"damaged store {exc.store}: {array}{exc.what}"
        traj = _recompute(job, problem, line, getattr(exc, "aside", None), planned)
        cache.setdefault("recomputed", []).append(job.id)
        status = "complete" if traj is not None else "failed"
    if status == "complete":
        pass
    elif status == "failed":
        traj = None
        fail = read_failure(job.store) or {}
        cache[("error", job.id)] = fail.get("error", {})
    else:
        raise MissingStoreError(
            f"{job.store}: run {job.id} of study {job.study!r} is {status}; "
            f"recompute it with: snakemake --cores N --forcerun {manifest_of_store(job.store)}"
        )
    if len(cache) > 8:  # keep memory bounded: rows are visited in order, partners are the next row
        for key in [k for k in cache if k != "recomputed"][:4]:
            cache.pop(key)
    cache[job.id] = traj
    return traj


def _recompute(job, problem, what: str, aside: str | None, planned=None):
    """The trajectory of a run whose store is not a good one (``what``: one phrase naming the store and what is
    wrong; ``aside``: where it was set aside), computed again into its store (``worker.solve_job``); None if the
    run fails (its marker written). One line on the study's aggregate log (and the terminal) says so."""
    import logging
    import sys

    line = f"{what}{f'; set aside as {aside}' if aside else ''}; recomputing run {job.id} now"
    log = logging.getLogger(f"hbvm.aggregate.{job.study}")
    log.warning(line) if log.handlers else print(f"hbvm: study {job.study}: {line}", file=sys.stderr, flush=True)
    if solve_job(job)["status"] != "ok":
        return None
    return load_trajectory(job.store, problem, job=job, planned=planned)


def study_rows(study: Study, workers: int = 1) -> list[dict]:
    """One dict per table row (keys COLUMNS + EXTRA, and the grid's keys in a study with a grid), methods in
    config order, then grid combinations in their order, h decreasing; rates within one method and combination.

    ``workers`` > 1: the blocks (method, combination) are computed in that many processes forked from this
    one (where the platform forks; each reads its runs' stores), the rows put back in order.
    """

    instances = study.instances or [study.instance_of("")]
    floors = {inst.key: reference_floor(study, inst) for inst in instances}  # once per instance, not per method
    blocks = [(sm, inst) for sm in study.methods for inst in instances]
    parts = forked_map(
        lambda i: _block_rows(study, *blocks[i], floors[blocks[i][1].key]), len(blocks), workers
    )  # a study is not pickled
    return [row for part in parts for row in part]


def _block_rows(study: Study, study_method, inst, floor: float | None = None) -> list[dict]:
    """The rows of one method and instance; ``floor``: the reference's accuracy (``reference_floor``) or None."""
    from hbvm_core.metrics import constraint_errors, errors, roundoff_scales

    rows: list[dict] = []
    cache: dict = {}
    for r in (r for r in study_method.rows if r.combo == inst.key):
        job = study.jobs[r.job]
        traj = _load(job, cache, inst.problem, inst.checked())
        partner = _load(study.jobs[r.partner], cache, inst.problem, inst.checked()) if r.partner else None
        row = {
            "problem": study.problem,
            "k": study_method.k,
            "s": study_method.s,
            "h": r.h,
            "study": study.name,
            "method": study_method.label,
            "name": study_method.name,
            "n": r.n,
            "t_end": inst.t_end,
            "status": "ok",
            "error": "",
            "steps": job.steps,
            "combo": inst.key,
            **inst.values,
        }
        if traj is None:
            err = cache.get(("error", job.id), {})
            row.update(status="failed", error=_short(err))
            row.update({k: math.nan for k in NUMERIC if k != "steps"}, wall_s=math.nan)
        elif r.partner and partner is None:
            err = cache.get(("error", r.partner), {})
            row.update(status="partner failed", error=f"h/2 run: {_short(err)}")
            e = errors(traj, study.convention, partner=traj)
            row.update(e, e_s=math.nan, e_lambda=math.nan)
        else:
            if study.reference == "none":
                e = errors(traj, study.convention, partner=traj)
                e.update(e_s=math.nan, e_lambda=math.nan)
            else:
                e = errors(traj, study.convention, partner=partner)
            row.update(e)
        # what each run loaded here recorded (timings.csv), so that run_timings need not open it again
        row["_stored"] = {j.id: t.attrs for j, t in ((job, traj), (study.jobs.get(r.partner), partner)) if t}
        if traj is not None:
            row["scales"] = roundoff_scales(traj)
            row["e_g_constraint"] = constraint_errors(traj)
            row["mean_iterations"] = float(traj.attrs.get("mean_iterations", math.nan))
            row["wall_s"] = float(traj.attrs.get("wall_s", math.nan))
            row["host"] = str(traj.attrs.get("host") or "")
        rows.append(row)
    if rows and cache.get("recomputed"):  # runs recomputed here: their manifest entries are refreshed (aggregate)
        rows[0]["_recomputed"] = list(cache["recomputed"])
    block_rates(rows, floor)
    for row in rows:
        row["reference_accuracy"] = math.nan if floor is None else float(floor)
    return rows


def block_rates(rows: list[dict], floor: float | None = None) -> None:
    """The rates, their flags and the fitted orders of one block (a method and combination, h decreasing).

    No rate where the pair's finer e_s is at the reference floor (``at_reference_floor`` of ``floor``, the
    reference's accuracy: flag ``reference_floor_s``), nor where both errors are at the round-off floor
    (``metrics.at_roundoff``: flags ``roundoff_*``); the reference floor is said first: an e_s under it
    measures the reference, whatever the arithmetic."""
    from hbvm_core.metrics import at_roundoff, rates

    h = [row["h"] for row in rows]
    for rate, e in RATES.items():
        rs = rates(h, [row.get(e, math.nan) for row in rows])
        ref = floor if rate in REFERENCE_FLOOR else None
        for i, (row, v) in enumerate(zip(rows, rs)):
            prev = rows[i - 1] if i else None
            scale = max((r.get("scales", {}).get(e, 1.0) for r in (prev, row) if r), default=1.0)
            pair = (prev.get(e, math.nan), row.get(e, math.nan)) if prev is not None else None
            below = pair is not None and at_reference_floor(*pair, ref)
            noise = pair is not None and not below and at_roundoff(*pair, scale)
            row[ROUNDOFF[rate]] = noise
            if rate in REFERENCE_FLOOR:
                row[REFERENCE_FLOOR[rate]] = below
            row[rate] = math.nan if noise or below else float(v)  # no rate of the reference's or round-off errors
    fit_orders(rows, floor)


def fit_orders(rows: list[dict], reference: float | None = None) -> None:
    """The fitted order of each error of one block (a method and combination, h decreasing) on the rows of its
    asymptotic range (``hbvm_core.metrics.fitted_order``, the floor of each row from its run's scales; for e_s at
    least REFERENCE_MARGIN times the reference's accuracy ``reference``), NaN on the others."""
    from hbvm_core.metrics import fitted_order, roundoff_floor

    h = [row["h"] for row in rows]
    for order, e in ORDERS.items():
        floors = [roundoff_floor(row.get("scales", {}).get(e, 1.0)) for row in rows]
        if reference is not None and e in {RATES[r] for r in REFERENCE_FLOOR}:
            floors = [max(f, REFERENCE_MARGIN * reference) for f in floors]
        p, first, last = fitted_order(h, [row.get(e, math.nan) for row in rows], floors)
        for i, row in enumerate(rows):
            row[order] = p if first <= i <= last else math.nan


def run_timings(study: Study, rows: list[dict] | None = None) -> list[dict]:
    """One dict per run (keys TIMINGS), methods in config order and h decreasing (h/2 partners included):
    the wall time, backend and Dask worker its store (or failure marker: time to the failure) recorded.

    ``rows``: the study's rows (``study_rows``), whose runs' attrs are used instead of opening their stores again.
    """

    stored = {run: attrs for row in rows or () for run, attrs in row.get("_stored", {}).items()}
    out = []
    order = {inst.key: i for i, inst in enumerate(study.instances)}
    for study_method in study.methods:
        jobs = (j for j in study.jobs.values() if j.label == study_method.label)
        for job in sorted(jobs, key=lambda j: (order.get(j.combo, 0), -j.h)):
            attrs = stored.get(job.id) or read_attrs(job.store)
            status = "ok"
            if attrs is None or (job.id not in stored and attrs.get("complete") is not True):
                attrs, status = read_failure(job.store) or {}, "failed"
            wall = attrs.get("wall_s")
            out.append(
                {
                    "_id": job.id,
                    "study": study.name,
                    "method": study_method.label,
                    "name": study_method.name,
                    "h": job.h,
                    "steps": job.steps,
                    "wall_s": math.nan if wall is None else float(wall),
                    "backend": attrs.get("backend", ""),
                    "worker": attrs.get("worker") or "",
                    "host": attrs.get("host") or "",
                    "status": status,
                    **study.instance_of(job.combo).values,
                }
            )
    return out


def _short(err: dict) -> str:
    if not err:
        return "failed"
    if "step" in err:
        where = f"step {err['step']} (t = {err['t']:.6g})"
        return f"{where}: {err.get('reason', '')}, last increment {err['increment']:.3e}"
    return str(err.get("message") or err.get("reason") or "failed")


# --------------------------------------------------------------------------- writers
def write_csv(rows: list[dict], path: str, columns: tuple[str, ...] = COLUMNS + EXTRA) -> None:
    """errors.csv (COLUMNS then EXTRA) or timings.csv (TIMINGS), written atomically; missing numbers
    (failed runs, first-row rates) are empty fields (``csv_table``: floats by repr)."""
    write_rows(rows, path, columns)


#: CF attributes (long_name, units) of errors.zarr's variables; errors and h are in the problem's
#: (nondimensional) units: units "1", with the time unit of h said in its description
VAR_ATTRS = {
    "e_s": ("solution error max_n ||y_n - y_ref(t_n)||", "1"),
    "rate_s": ("observed order of e_s, log(e_prev / e) / log(h_prev / h)", "1"),
    "e_lambda": ("multiplier error max_n ||lam_n - lam_ref(t_n)||", "1"),
    "rate_lambda": ("observed order of e_lambda", "1"),
    "e_H": ("energy error max_n |H(y_n) - H(y_0)|", "1"),
    "e_g": ("constraint error max_n ||g(q_n)||_inf", "1"),
    "e_hc": ("hidden constraint error max_n ||G(q_n)^T M^-1 p_n||", "1"),
    "rate_hc": ("observed order of e_hc", "1"),
    "order_s": ("fitted order of e_s over its asymptotic range (the rows where it is not NaN)", "1"),
    "order_lambda": ("fitted order of e_lambda over its asymptotic range (the rows where it is not NaN)", "1"),
    "order_hc": ("fitted order of e_hc over its asymptotic range (the rows where it is not NaN)", "1"),
    "steps": ("number of steps", "1"),
    "mean_iterations": ("mean nonlinear iterations per step", "1"),
    "wall_s": ("wall time of the run", "s"),
}


def errors_dataset(study: Study, rows: list[dict]):
    """An xarray Dataset over (scheme, h): the errors, rates and run statistics; NaN where not run.

    The run dimension is ``scheme`` (not ``method``, which is a keyword of ``.sel``): its
    values are the method labels (``hbvm_k2_s2``), with ``k``, ``s`` and ``name`` as
    coordinates along it, so ``ds.sel(scheme="hbvm_k2_s2")`` or
    ``ds.set_index(scheme=["k", "s"]).sel(k=2, s=2)`` pick one method and
    ``ds.sel(h=0.025)`` (or ``method="nearest"``) one step size. ``roundoff_s``,
    ``roundoff_lambda`` and ``roundoff_hc`` flag the rows whose rate is missing because both
    errors of the pair lie at the round-off floor (``hbvm_core.metrics.at_roundoff``);
    ``reference_floor_s`` those whose e_s is at the numerical reference's accuracy (``block_rates``).
    """
    labels = [m.label for m in study.methods]
    hs = sorted({row["h"] for row in rows}, reverse=True)
    mi = {lab: i for i, lab in enumerate(labels)}
    hi = {h: j for j, h in enumerate(hs)}
    grid = study.grid
    shape = (len(labels), len(hs), *(len(v) for v in grid.values()))
    data = {c: np.full(shape, np.nan) for c in NUMERIC + ("wall_s",)}
    flags = {f: np.zeros(shape, dtype=bool) for f in (*ROUNDOFF.values(), *REFERENCE_FLOOR.values())}
    status = np.full(shape, -1, dtype="i1")
    nval = np.full(shape, -1, dtype="i8")
    host = np.full(shape, "", dtype=object)
    position = study.grid_positions()
    for row in rows:
        at = (mi[row["method"]], hi[row["h"]], *position(row))
        for c in data:
            v = row.get(c)
            data[c][at] = np.nan if v is None else float(v)
        for f in flags:
            flags[f][at] = bool(row.get(f, False))
        status[at] = STATUS[row["status"]]
        host[at] = row.get("host") or ""
        nval[at] = -1 if row["n"] is None else int(row["n"])
    by_h: dict[float, set] = {}
    for row in rows:
        by_h.setdefault(row["h"], set()).add(row["n"])
    each = np.full((*shape, study.dims[1]), np.nan)
    accuracy = np.full(shape[2:], np.nan)
    for row in rows:
        if row.get("e_g_constraint") is not None:
            at = (mi[row["method"]], hi[row["h"]], *position(row))
            g_i = np.asarray(row["e_g_constraint"], dtype=float)  # an instance with fewer constraints: NaN after
            each[(*at, slice(0, g_i.size))] = g_i
        if row.get("reference_accuracy") is not None:
            accuracy[position(row)] = row["reference_accuracy"]
    return dense_errors_dataset(study, hs, data, flags, status, host, nval, by_h, each, accuracy)


def dense_errors_dataset(
    study: Study, hs, data: dict, flags: dict, status, host, nval, by_h: dict, e_g_constraint, accuracy=None
):
    """errors.zarr's Dataset from its arrays over (scheme, h, *grid) (``errors_dataset``; the sharded studies'
    ``ensemble_errors``): ``hs`` the step sizes decreasing, ``by_h`` h -> its set of row labels n,
    ``e_g_constraint`` the error of each constraint over (scheme, h, *grid, constraint) (unused for nu = 0),
    ``accuracy`` the reference's estimated accuracy over (*grid) (``reference_floor``; NaN: none)."""
    import xarray as xr

    grid = study.grid
    dims = ("scheme", "h", *grid)
    labels = [m.label for m in study.methods]
    coords = {
        "scheme": ("scheme", np.array(labels, dtype=object)),
        "h": ("h", np.array(hs, dtype=float)),
        "name": ("scheme", np.array([m.name for m in study.methods], dtype=object)),
        "k": ("scheme", np.array([m.k or 0 for m in study.methods], dtype="i8")),
        "s": ("scheme", np.array([m.s or 0 for m in study.methods], dtype="i8")),
        "n": _n_coord(by_h, hs, dims, nval),
        "host": (dims, host),
        **{key: (key, _grid_coord(values)) for key, values in grid.items()},
    }
    ds = xr.Dataset({c: (dims, v) for c, v in data.items()}, coords=coords)
    for c, (long_name, units) in VAR_ATTRS.items():
        ds[c].attrs.update(long_name=long_name, units=units)
    nu = study.dims[1]
    if nu:  # e_g,i per constraint i (errors.csv keeps e_g, their maximum)
        ds["e_g_constraint"] = ((*dims, "constraint"), e_g_constraint)
        ds["e_g_constraint"].attrs.update(long_name="constraint error max_n |g_i(q_n)| of constraint i", units="1")
        ds.coords["constraint"] = ("constraint", np.arange(nu, dtype="i8"))
        ds.coords["constraint"].attrs.update(
            long_name="constraint index", units="1", description="i of g_i, from 0 (the problem's order of g)"
        )
    for f, e in zip(ROUNDOFF.values(), RATES.values()):
        ds[f] = (dims, flags[f])
        ds[f].attrs.update(long_name=f"{e} of this and the previous h both at the round-off floor (no rate)", units="1")
    for f, rate in zip(REFERENCE_FLOOR.values(), REFERENCE_FLOOR):
        ds[f] = (dims, flags.get(f, np.zeros(status.shape, dtype=bool)))
        what = f"{RATES[rate]} at this h within {REFERENCE_MARGIN:g} times the reference's estimated accuracy (no rate)"
        ds[f].attrs.update(long_name=what, units="1")
    ds["reference_accuracy"] = (tuple(grid), np.full(status.shape[2:], np.nan) if accuracy is None else accuracy)
    ds["reference_accuracy"].attrs.update(
        long_name="the numerical reference's estimated accuracy (reference_floor); NaN: a closed form or none",
        units="1",
    )
    ds["status"] = (dims, status)
    ds["status"].attrs.update(
        long_name="run status", units="1", flag_values=[-1, 0, 1, 2], flag_meanings="not_run ok failed partner_failed"
    )
    coord_attrs = {
        "scheme": ("method label", "1", "the study's method label, e.g. hbvm_k2_s2"),
        "h": ("step size", "1", "in the problem's (nondimensional) time unit"),
        "name": ("method name", "1", "display name, e.g. HBVM(2,2)"),
        "k": ("HBVM k", "1", "0: not an HBVM method"),
        "s": ("HBVM s", "1", "0: not an HBVM method"),
        "n": (
            "row label n",
            "1",
            "n of the step-size rule (halvings, period_divisions), along h where each h has one n "
            "(open_errors then indexes it: .sel(n=24)); -1: explicit h or not run",
        ),
        "host": ("host", "1", "the machine that computed the run; '': not run"),
    }
    for key in grid:
        coord_attrs[key] = (f"problem parameter {key}", "1", "a grid value (a keyword of the problem factory)")
    for c, (long_name, units, description) in coord_attrs.items():
        ds.coords[c].attrs.update(long_name=long_name, units=units, description=description)
    ds.attrs.update(
        {
            "study": study.name,
            "problem": study.problem,
            "params": json.dumps(study.params, sort_keys=True),
            "t_end": study.t_end,
            "errors": json.dumps(_convention(study), sort_keys=True),
        }
    )
    if study.grid:
        ds.attrs["grid"] = json.dumps(study.grid, sort_keys=False)
    return ds


def _n_coord(by_h: dict, hs: list[float], dims: tuple, nval: np.ndarray) -> tuple:
    """The row label n: a coordinate along h (one n per h, as in halvings and period_divisions, where
    h = h0 2^-n or T/n), or, where some h has none or several, over all the dimensions (-1: none)."""
    if all(len(v) == 1 and None not in v for v in by_h.values()):
        return ("h", np.array([next(iter(by_h[h])) for h in hs], dtype="i8"))
    return (dims, nval)


def _grid_coord(values: list) -> np.ndarray:
    """A grid key's coordinate: its values as numbers, or as text (``layout.combo_name``'s form) otherwise."""

    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=float)
    return np.array([combo_name({"": v})[1:] for v in values], dtype=object)


def _convention(study: Study) -> dict:
    d = study.convention.as_dict()
    d["reference"] = study.reference
    return d


def _fmt_e(v) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:.4e}"


def _fmt_r(v) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:.2f}"


def _fmt_h(row, label: str) -> list[str]:
    """The row's label cells: n and its step size h, or h alone."""
    h = f"{row['h']:.6g}"
    return [str(row["n"]), h] if label == "n" else [h]


def _labels(label: str) -> tuple[str, ...]:
    return ("n", "h") if label == "n" else ("h",)


#: each rate column names the error whose observed order it is
HEAD = ("e_s", "rate(e_s)", "e_lambda", "rate(e_lambda)", "e_H", "e_g", "e_hc", "rate(e_hc)")
KEYS = ("e_s", "rate_s", "e_lambda", "rate_lambda", "e_H", "e_g", "e_hc", "rate_hc")


def _cells(row) -> list[str]:
    if row["status"] == "failed":
        return ["failed"] + ["—"] * (len(KEYS) - 1)
    cells = [(_fmt_r if k.startswith("rate") else _fmt_e)(row[k]) for k in KEYS]
    for i, k in enumerate(KEYS):
        if k in ROUNDOFF and row.get(ROUNDOFF[k]):
            cells[i] = "round-off"
        if k in REFERENCE_FLOOR and row.get(REFERENCE_FLOOR[k]):
            cells[i] = "reference floor"
    if row["status"] == "partner failed":
        cells[0] = cells[2] = "failed (h/2)"
    return cells


#: the label of a block's last row: per rate column, the fitted order of its error and its h range
FITTED = "fitted order (h range)"


def _fitted_cells(block: list[dict]) -> list[str]:
    """The cells (KEYS) of a block's fitted-order row: in each rate column "2.00 (h 0.1..0.0125)", the fitted
    order of its error over its asymptotic range (``fit_orders``), "—" where there is none; blank elsewhere."""
    cells = []
    for k in KEYS:
        if k not in ORDER_OF_RATE:
            cells.append("")
            continue
        fit = [r for r in block if math.isfinite(r.get(ORDER_OF_RATE[k], math.nan))]
        p = fit[0][ORDER_OF_RATE[k]] if fit else math.nan
        cells.append(f"{p:.2f} (h {fit[0]['h']:.6g}..{fit[-1]['h']:.6g})" if fit else "—")
    return cells


def _fitted_labels(label: str) -> list[str]:
    return [FITTED] + [""] * (len(_labels(label)) - 1)


def _norm_words(norm) -> str:
    return "max norm" if norm == "inf" else f"{norm}-norm"


def _sample_words(sample) -> str:
    if sample == "all":
        return "at every step"
    if sample == "periods":
        return "at whole periods"
    return f"every {sample:.10g} time units"


REFERENCE_WORDS = {
    "exact": "against the exact solution",
    "reference": "against a reference solution",
    "self": "against the same method with h/2",
}


def _errors_words(study: Study) -> str:
    """The error convention in words (docs/method.md section 5): reference, norm and sampling."""
    c = study.convention
    if study.reference == "none":
        words = ["no reference: e_s and e_lambda not computed"]
    else:
        ref = REFERENCE_WORDS[study.reference]
        if study.reference == "reference" and c.reference_kind != "auto":
            ref += f" ({c.reference_kind})"
        if study.reference == "reference" and getattr(c, "reference_rtol", None) is not None:
            ref += f" (DOP853 at rtol {c.reference_rtol:g} where an ODE)"
        words = [f"errors {ref}, in the {_norm_words(c.norm)}, sampled {_sample_words(c.sample)}"]
        if c.lambda_sample is not None:
            words.append(f"e_lambda sampled {_sample_words(c.lambda_sample)}")
    if c.hc_norm is not None:
        words.append(f"e_hc in the {_norm_words(c.hc_norm)}")
    return "; ".join(words)


def _describe(study: Study) -> str:
    period = f", T = {study.period:.10g}" if study.period else ""
    return f"{study.problem} on [0, {study.t_end:.10g}]{period}; {_errors_words(study)}"


def _blocks(study: Study, rows: list[dict]):
    """(heading, rows) per table block: one per method, and per grid combination in a study with a grid."""
    for study_method in study.methods:
        for inst in study.instances or [study.instance_of("")]:
            block = [r for r in rows if r["method"] == study_method.label and r.get("combo", "") == inst.key]
            heading = f"{study_method.name}, {inst.key.replace(',', ', ')}" if inst.key else study_method.name
            yield study_method, heading, block


def markdown_table(study: Study, rows: list[dict]) -> str:
    """table.md: per method a block of rows (n and h, or h; e_s, rate(e_s), e_lambda, rate(e_lambda), e_H, e_g,
    e_hc, rate(e_hc)), and a last row FITTED: each error's fitted order and its h range in its rate column.
    A sweep or a large grid: the compact summary (``grid_tables.sections``)."""
    if is_compact(study):
        return compact_markdown(study, rows)
    label = study.row_label
    labels = _labels(label)
    lines = [f"# {study.title}", "", _describe(study), ""]
    notes = []
    for _, heading, block in _blocks(study, rows):
        lines += [f"## {heading}", "", "| " + " | ".join(labels + HEAD) + " |"]
        lines.append("|" + "---:|" * (len(HEAD) + len(labels)))
        for row in block:
            lines.append("| " + " | ".join(_fmt_h(row, label) + _cells(row)) + " |")
            if row["status"] != "ok":
                notes.append(f"- {heading}, {label} = {_fmt_h(row, label)[0]}: {row['status']}: {row['error']}")
        lines.append("| " + " | ".join(_fitted_labels(label) + _fitted_cells(block)) + " |")
        lines.append("")
    if notes:
        lines += ["Failures:", "", *notes, ""]
    return "\n".join(lines)


def _tex(s: str) -> str:
    return s.replace("_", r"\_").replace("—", "--").replace("%", r"\%")


def latex_table(study: Study, rows: list[dict]) -> str:
    """table.tex: one booktabs tabular, a block per method (a sweep or a large grid: ``grid_tables.sections``)."""
    if is_compact(study):
        return compact_latex(study, rows)
    label = study.row_label
    rate = ["rate($e_s$)", r"rate($e_\lambda$)", r"rate($e_{hc}$)"]
    head = [f"${c}$" for c in _labels(label)] + ["$e_s$", rate[0], r"$e_\lambda$", rate[1], "$e_H$", "$e_g$"]
    head += [r"$e_{hc}$", rate[2]]
    lines = [
        f"% {study.title}: {_tex(_describe(study))}",
        r"\begin{tabular}{" + "r" * len(head) + "}",
        r"\toprule",
    ]
    for i, (_, heading, block) in enumerate(_blocks(study, rows)):
        if i:
            lines.append(r"\midrule")
        lines.append(rf"\multicolumn{{{len(head)}}}{{l}}{{{_tex(heading)}}} \\")
        lines.append(" & ".join(head) + r" \\")
        lines.append(r"\midrule")
        for row in block:
            cells = _fmt_h(row, label) + [_tex(c) for c in _cells(row)]
            lines.append(" & ".join(cells) + r" \\")
        lines.append(" & ".join([_tex(c) for c in _fitted_labels(label) + _fitted_cells(block)]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


#: the head of table.html, up to <body> (``title``: escaped)
HTML_HEAD = (
    "<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
    "<style>table{{border-collapse:collapse;margin-bottom:1em}}td,th{{padding:2px 8px;text-align:right;"
    "border-bottom:1px solid #ddd;font-family:monospace}}</style></head><body>"
)


def html_table(study: Study, rows: list[dict]) -> str:
    """table.html (for the Snakemake report): the Markdown layout as HTML tables (a sweep or a large grid:
    ``grid_tables.sections``)."""
    from html import escape

    label = study.row_label
    if is_compact(study):
        return compact_html(study, rows)
    parts = [HTML_HEAD.format(title=escape(study.title))]
    parts.append(f"<h2>{escape(study.title)}</h2><p>{escape(_describe(study))}</p>")
    for _, heading, block in _blocks(study, rows):
        parts.append(f"<h3>{escape(heading)}</h3><table><tr>")
        parts += [f"<th>{escape(c)}</th>" for c in _labels(label) + HEAD]
        parts.append("</tr>")
        for row in block:
            cells = _fmt_h(row, label) + _cells(row)
            parts.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
        cells = _fitted_labels(label) + _fitted_cells(block)
        parts.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _compact_caption(study: Study) -> str:
    return f"{_describe(study)}; {grid_tables.grid_words(study)}"


def compact_markdown(study: Study, rows: list[dict], parts: tuple | None = None) -> str:
    """table.md of a sweep or a large grid (``parts``: ``grid_tables.sections``, computed here if not given)."""
    parts, notes = parts or grid_tables.sections(study, rows)
    lines = [f"# {study.title}", "", _compact_caption(study), ""]
    for sec in parts:
        lines += [f"## {sec.heading}", "", "| " + " | ".join(sec.header) + " |", "|" + "---:|" * len(sec.header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in sec.rows]
        lines.append("")
    if notes:
        lines += ["Failures:", "", *(f"- {n}" for n in notes), ""]
    return "\n".join(lines)


def compact_latex(study: Study, rows: list[dict], parts: tuple | None = None) -> str:
    """table.tex of a sweep or a large grid: a booktabs tabular per section, the failures as comments."""
    parts, notes = parts or grid_tables.sections(study, rows)
    lines = [f"% {study.title}: {_tex(_compact_caption(study))}"]
    for sec in parts:
        width = len(sec.header)
        lines += [r"\begin{tabular}{" + "r" * width + "}", r"\toprule"]
        lines.append(rf"\multicolumn{{{width}}}{{l}}{{{_tex(sec.heading)}}} \\")
        lines += [" & ".join(_tex(c) for c in sec.header) + r" \\", r"\midrule"]
        lines += [" & ".join(_tex(c) for c in cells) + r" \\" for cells in sec.rows]
        lines += [r"\bottomrule", r"\end{tabular}", ""]
    lines += [f"% {_tex(n)}" for n in notes]
    return "\n".join(lines) + "\n"


def compact_html(study: Study, rows: list[dict], parts: tuple | None = None) -> str:
    """table.html of a sweep or a large grid."""
    from html import escape

    parts, notes = parts or grid_tables.sections(study, rows)
    out = [HTML_HEAD.format(title=escape(study.title)), f"<h2>{escape(study.title)}</h2>"]
    out.append(f"<p>{escape(_compact_caption(study))}</p>")
    for sec in parts:
        out.append(f"<h3>{escape(sec.heading)}</h3><table><tr>")
        out += [f"<th>{escape(c)}</th>" for c in sec.header]
        out.append("</tr>")
        out += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>" for cells in sec.rows]
        out.append("</table>")
    if notes:
        out.append("<p>Failures:</p><ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    out.append("</body></html>\n")
    return "".join(out)


def refresh_manifest(study: Study, runs: list[str]) -> None:
    """Record in the study's manifest the file signature of the ``runs`` recomputed by the aggregation (their
    stores were found damaged), so that the next parse does not take them for changed stores."""
    if not runs:
        return

    path = manifest_path(study.results, study.name)
    try:
        with open(path) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError):
        return
    for entry in manifest.get("jobs", []):
        if entry.get("id") in runs:
            job = study.jobs[entry["id"]]
            if read_failure(job.store) is not None and not os.path.exists(job.store):
                entry.update(status="failed", error=(read_failure(job.store) or {}).get("error"))
                entry.pop("stat", None)
            else:
                entry["stat"] = file_signature(job.store)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


def aggregate(
    study: Study,
    out_zarr: str,
    out_csv: str,
    out_md: str,
    out_tex: str,
    out_html: str | None = None,
    out_timings: str | None = None,
    workers: int = 1,
) -> list[dict]:
    """Compute the rows and write errors.zarr, errors.csv, table.md, table.tex (and table.html, and
    timings.csv: by default next to errors.csv). ``workers``: processes reading the runs (``study_rows``)."""
    rows = compute_errors(study, out_zarr, out_csv, out_timings, workers)
    write_tables(study, rows, out_md, out_tex, out_html)
    return rows


def compute_errors(
    study: Study, out_zarr: str, out_csv: str, out_timings: str | None = None, workers: int = 1
) -> list[dict]:
    """The numbers of a study of run stores: its rows (``study_rows``) written as errors.zarr, errors.csv and
    timings.csv (a ``save: summary`` study's: ``ensemble_errors.compute_summary_errors``).

    What they hold depends only on the runs and the keys that define the numbers, never on the title or the
    figure's keys (the workflow's rule aggregate; rule render lays them out, ``rows_from_outputs``)."""

    rows = study_rows(study, workers)
    refresh_manifest(study, [run for row in rows for run in row.get("_recomputed", ())])
    write_dataset(errors_dataset(study, rows), out_zarr, tmp_dir=tmp_dir(study.results, study.name))
    grid = tuple(study.grid)  # one column per grid key, only in a study with a grid
    write_csv(rows, out_csv, COLUMNS + EXTRA + grid)
    timings = out_timings or timings_beside(out_csv)
    measured = run_timings(study, rows)
    extra = ()
    if study.study_kind == "work_precision":  # the best of repeated timings, one run at a time (beyond.measure)
        best, repeats = measure(study), timing_repeats(study)
        for row in measured:
            row.update(best_wall_s=best.get(row.pop("_id"), math.nan), repeats=repeats)
        extra = MEASURED
    write_csv(measured, timings, TIMINGS + grid + extra)
    return rows


def write_tables(study: Study, rows: list[dict], out_md: str, out_tex: str, out_html: str | None = None) -> None:
    """table.md, table.tex (and table.html) of the rows, each written atomically."""
    if is_compact(study):  # the summary computed once for the three
        parts = grid_tables.sections(study, rows)
        texts = [(out_md, compact_markdown(study, rows, parts)), (out_tex, compact_latex(study, rows, parts))]
        texts += [(out_html, compact_html(study, rows, parts))] if out_html else []
    else:
        texts = [(out_md, markdown_table(study, rows)), (out_tex, latex_table(study, rows))]
        texts += [(out_html, html_table(study, rows))] if out_html else []
    for path, text in texts:
        with open(path + ".tmp", "w") as fh:
            fh.write(text)
        os.replace(path + ".tmp", path)


def rows_from_outputs(study: Study, csv_path: str, zarr_path: str) -> list[dict]:
    """The rows that ``compute_errors`` wrote, read back for the tables: the numbers, status and error of each row
    from errors.csv (floats written by repr, read back exactly), its grid combination from the study's rows (in the
    same order), the round-off and reference-floor flags from errors.zarr. ValueError if the files are not the
    study's rows."""

    instances = study.instances or [study.instance_of("")]
    expected = []
    for study_method in study.methods:
        by_combo: dict[str, list] = {}
        for r in study_method.rows:
            by_combo.setdefault(r.combo, []).append(r)
        expected += [(study_method, inst, r) for inst in instances for r in by_combo.get(inst.key, ())]
    with open(csv_path, newline="") as fh:
        found = list(csv.DictReader(fh))
    if len(found) != len(expected):
        raise ResultsMismatchError(f"{csv_path}: {len(found)} rows, the study has {len(expected)}")
    ds = open_errors_at(zarr_path)
    labels = {str(x): i for i, x in enumerate(ds.scheme.values)}
    hs = {float(x): j for j, x in enumerate(ds.h.values)}
    names = (*ROUNDOFF.values(), *REFERENCE_FLOOR.values())
    flags = {flag: np.asarray(ds[flag].values, dtype=bool) for flag in names if flag in ds}  # read once, not per row
    accuracy = np.asarray(ds["reference_accuracy"].values, dtype=float) if "reference_accuracy" in ds else None
    position = study.grid_positions()
    rows = []
    for (study_method, inst, r), raw in zip(expected, found):
        if raw["method"] != study_method.label or float(raw["h"]) != r.h:
            where = f"row {raw['method']} h = {raw['h']}"
            raise ResultsMismatchError(f"{csv_path}: {where} where the study has {study_method.label} h = {r.h}")
        row: dict = {"method": study_method.label, "h": r.h, "n": r.n, "combo": inst.key, **inst.values}
        row["status"], row["error"] = raw["status"], raw["error"]
        for key in NUMERIC:
            row[key] = float(raw[key]) if raw.get(key, "") != "" else math.nan
        at = (labels[study_method.label], hs[r.h], *position(inst.values))
        for flag, values in flags.items():
            row[flag] = bool(values[at])
        row["reference_accuracy"] = math.nan if accuracy is None else float(accuracy[at[2:]])
        rows.append(row)
    return rows
